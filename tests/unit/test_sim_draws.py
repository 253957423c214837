"""Each simulated request's acceptance draws follow its prompt and how often that prompt was asked, never the order
requests arrived in (``sim.draws``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from specwatch.sim import draws


def first_draws(seeds: draws.DrawSeeds, prompts: list[str]) -> dict[tuple[str, int], list[float]]:
    out: dict[tuple[str, int], list[float]] = {}
    for p in prompts:
        n = sum(1 for key in out if key[0] == p)
        rng = seeds.rng_for(p)
        out[p, n] = [rng.random() for _ in range(3)]
    return out


@given(st.lists(st.sampled_from(["a", "b", "Tell me about the sea.", ""]), min_size=1, max_size=30), st.randoms())
def test_the_same_prompts_in_any_order_draw_the_same(prompts, rnd):
    shuffled = list(prompts)
    rnd.shuffle(shuffled)
    assert first_draws(draws.DrawSeeds(5), prompts) == first_draws(draws.DrawSeeds(5), shuffled)


def test_repeats_of_a_prompt_other_prompts_and_other_seeds_draw_apart():
    got = first_draws(draws.DrawSeeds(5), ["a", "a", "b"])
    assert len({tuple(v) for v in got.values()}) == 3
    assert first_draws(draws.DrawSeeds(6), ["a"])["a", 0] != got["a", 0]


def test_reseeding_starts_the_counts_again():
    seeds = draws.DrawSeeds(5)
    first = seeds.rng_for("a").random()
    seeds.rng_for("a")
    seeds.reseed(5)
    assert seeds.rng_for("a").random() == first


def test_the_prompts_remembered_are_bounded(monkeypatch):
    monkeypatch.setattr(draws, "MAX_PROMPTS", 3)
    seeds = draws.DrawSeeds(5)
    for p in ("a", "b", "c", "d"):
        seeds.rng_for(p)
    assert len(seeds._asked) <= 3
