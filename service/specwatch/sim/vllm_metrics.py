"""vLLM's own ``vllm:`` Prometheus metrics, as the simulator's vLLM flavour exposes them on ``/metrics``.

Names, types, labels (``engine``, ``model_name``; ``position`` per draft position, ``finished_reason``) and
histogram buckets are vLLM V1's (vllm/v1/metrics). The spec-decode counters exist only with a speculative
config, as in vLLM, and start at 0. ``inter_token_latency_seconds`` is observed once per engine step per
request, as vLLM does: with speculation it measures step latency, not per-token latency.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from .engine import Engine, SimRequest

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
               80.0)
REQUEST_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
                   480.0, 960.0, 1920.0, 7680.0)
FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")


class VLLMMetrics:
    def __init__(self, model_name: str, engine: Engine) -> None:
        self.engine = engine
        r = self.registry = CollectorRegistry()
        self.lab = {"engine": "0", "model_name": model_name}
        names = list(self.lab)

        def counter(name: str, doc: str, extra: tuple[str, ...] = ()) -> Counter:
            return Counter(f"vllm:{name}", doc, [*names, *extra], registry=r)

        self.running = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.", names,
                             registry=r)
        self.waiting = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", names,
                             registry=r)
        self.kv = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", names, registry=r)
        self.prompt = counter("prompt_tokens", "Number of prefill tokens processed.")
        self.generation = counter("generation_tokens", "Number of generation tokens processed.")
        self.success = counter("request_success", "Count of successfully processed requests.", ("finished_reason",))
        self.preemptions = counter("num_preemptions", "Cumulative number of preemption from the engine.")
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                              names, registry=r, buckets=TTFT_BUCKETS)
        self.itl = Histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                             names, registry=r, buckets=ITL_BUCKETS)
        self.tpot = Histogram("vllm:request_time_per_output_token_seconds",
                              "Histogram of time_per_output_token_seconds per request.", names, registry=r,
                              buckets=ITL_BUCKETS)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                             names, registry=r, buckets=REQUEST_BUCKETS)
        for c in (self.prompt, self.generation, self.preemptions):
            c.labels(**self.lab)
        for reason in FINISHED_REASONS:
            self.success.labels(**self.lab, finished_reason=reason)
        self.spec = engine.s.spec.enabled
        if self.spec:
            self.drafts = counter("spec_decode_num_drafts", "Number of spec decoding drafts.")
            self.draft_tokens = counter("spec_decode_num_draft_tokens", "Number of draft tokens.")
            self.accepted = counter("spec_decode_num_accepted_tokens", "Number of accepted tokens.")
            self.per_pos = counter("spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position.",
                                   ("position",))
            for c in (self.drafts, self.draft_tokens, self.accepted):
                c.labels(**self.lab)
            for i in range(engine.s.spec.num_steps):
                self.per_pos.labels(**self.lab, position=str(i))
        self._seen = {"prompt": 0, "generation": 0, "drafts": 0, "draft_tokens": 0, "accepted": 0}
        self._seen_pos = [0] * engine.s.spec.num_steps
        self._last_step: dict[str, int] = {}

    def on_step(self, req: SimRequest, tokens: int, now_ns: int) -> None:
        last = self._last_step.get(req.rid, req.first_ns)
        self.itl.labels(**self.lab).observe((now_ns - last) / 1e9)
        self._last_step[req.rid] = now_ns

    def on_finish(self, req: SimRequest) -> None:
        self._last_step.pop(req.rid, None)
        reason = "length" if req.finish_reason and req.finish_reason.get("type") == "length" else "stop"
        self.success.labels(**self.lab, finished_reason=reason).inc()
        self.ttft.labels(**self.lab).observe((req.first_ns - req.arrival_ns) / 1e9)
        self.e2e.labels(**self.lab).observe((req.last_ns - req.arrival_ns) / 1e9)
        if req.completion_tokens > 1:
            self.tpot.labels(**self.lab).observe((req.last_ns - req.first_ns) / 1e9 / (req.completion_tokens - 1))

    def on_abort(self, req: SimRequest) -> None:
        self._last_step.pop(req.rid, None)
        self.success.labels(**self.lab, finished_reason="abort").inc()

    def _advance(self, counter: Counter, key: str, total: int) -> None:
        counter.labels(**self.lab).inc(total - self._seen[key])
        self._seen[key] = total

    def render(self) -> bytes:
        e = self.engine
        self.running.labels(**self.lab).set(len(e.running))
        self.waiting.labels(**self.lab).set(len(e.waiting))
        self.kv.labels(**self.lab).set(e.used_tokens / e.s.profile.max_total_tokens)
        self._advance(self.prompt, "prompt", e.totals.prompt_tokens)
        self._advance(self.generation, "generation", e.totals.generation_tokens)
        if self.spec:
            self._advance(self.drafts, "drafts", e.totals.drafts)
            self._advance(self.draft_tokens, "draft_tokens", e.totals.draft_tokens)
            self._advance(self.accepted, "accepted", e.totals.accepted)
            for i, total in enumerate(e.totals.accepted_pos):
                self.per_pos.labels(**self.lab, position=str(i)).inc(total - self._seen_pos[i])
                self._seen_pos[i] = total
        return generate_latest(self.registry)
