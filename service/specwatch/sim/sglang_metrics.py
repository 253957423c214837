"""SGLang's own ``sglang:`` Prometheus metrics, as the simulator exposes them with --enable-metrics.

Scheduler gauges are set at each decode log line (as in SGLang); request counters and histograms move
when requests finish. Names and labels are SGLang's (``sglang:`` prefix, ``model_name`` label), as its
``--enable-metrics`` exposes them.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from .engine import Engine, SimRequest


class SGLangMetrics:
    def __init__(self, model_name: str, engine: Engine) -> None:
        self.registry = CollectorRegistry()
        self.engine = engine
        sched = {"model_name": model_name, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0"}
        names = list(sched)
        r = self.registry

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(f"sglang:{name}", doc, names, registry=r)

        self._gauges = {
            "num_running_reqs": gauge("num_running_reqs", "The number of running requests."),
            "num_queue_reqs": gauge("num_queue_reqs", "The number of requests in the waiting queue."),
            "num_used_tokens": gauge("num_used_tokens", "The number of used tokens."),
            "token_usage": gauge("token_usage", "The token usage."),
            "gen_throughput": gauge("gen_throughput", "The generation throughput (token/s)."),
            "spec_accept_length": gauge("spec_accept_length", "The average acceptance length of speculative decoding."),
            "spec_accept_rate": gauge("spec_accept_rate", "The average acceptance rate of speculative decoding."),
            "spec_num_steps": gauge("spec_num_steps", "Speculative num steps."),
            "spec_num_draft_tokens": gauge("spec_num_draft_tokens", "Speculative num draft tokens."),
        }
        self._labels = sched
        tok = {"model_name": model_name}
        self._tok = tok
        self.generation_tokens = Counter("sglang:generation_tokens", "Number of generation tokens processed.",
                                         list(tok), registry=r)
        self.prompt_tokens = Counter("sglang:prompt_tokens", "Number of prefill tokens processed.",
                                     list(tok), registry=r)
        self.requests = Counter("sglang:num_requests", "Number of requests processed.", list(tok), registry=r)
        self.verify_calls = Counter("sglang:spec_verify_calls", "Number of speculative verify calls.",
                                    list(tok), registry=r)
        self.ttft = Histogram("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                              list(tok), registry=r,
                              buckets=(0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400))
        self.e2e = Histogram("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds",
                             list(tok), registry=r,
                             buckets=(0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400,
                                      800, 1200, 2400))
        for c in (self.generation_tokens, self.prompt_tokens, self.requests, self.verify_calls):
            c.labels(**tok)
        spec = engine.s.spec
        self._gauges["spec_num_steps"].labels(**sched).set(spec.server_steps)
        self._gauges["spec_num_draft_tokens"].labels(**sched).set(spec.num_draft_tokens if spec.enabled else 0)

    def on_finish(self, req: SimRequest) -> None:
        t = self._tok
        self.generation_tokens.labels(**t).inc(req.completion_tokens)
        self.prompt_tokens.labels(**t).inc(req.prompt_tokens)
        self.requests.labels(**t).inc()
        self.verify_calls.labels(**t).inc(req.verify_ct)
        self.ttft.labels(**t).observe((req.first_ns - req.arrival_ns) / 1e9)
        self.e2e.labels(**t).observe((req.last_ns - req.arrival_ns) / 1e9)

    def render(self) -> bytes:
        e, g, lab = self.engine, self._gauges, self._labels
        g["num_running_reqs"].labels(**lab).set(len(e.running))
        g["num_queue_reqs"].labels(**lab).set(len(e.waiting))
        g["num_used_tokens"].labels(**lab).set(e.used_tokens)
        g["token_usage"].labels(**lab).set(e.used_tokens / e.s.profile.max_total_tokens)
        g["gen_throughput"].labels(**lab).set(e.log.last_gen_throughput)
        g["spec_accept_length"].labels(**lab).set(e.log.last_accept_length)
        g["spec_accept_rate"].labels(**lab).set(e.log.last_accept_rate)
        if e.s.spec.enabled:  # the running step count (SGLang reads it from the draft worker: adaptive moves it)
            # NGRAM reports SGLang's draft tokens // breadth, not the simulated chain's depth
            spec_steps = e.current_steps if e.s.spec.reported_steps is None else e.s.spec.reported_steps
            g["spec_num_steps"].labels(**lab).set(spec_steps)
            g["spec_num_draft_tokens"].labels(**lab).set(e.current_steps + 1 if e.s.spec.topk == 1
                                                         else e.s.spec.num_draft_tokens)
        return generate_latest(self.registry)
