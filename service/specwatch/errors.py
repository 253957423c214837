"""One exception tree for the whole profiler (the simulator, a separate part, has its own few).

    SpecwatchError
     ├── ConfigError          a bad option value (flag, SPECWATCH_* variable, TOML key): the command exits 2
     │    ├── UrlError          a server URL that is not a base URL
     │    └── PromptFileError   a --prompts file that cannot be read or holds no prompts
     ├── TargetError          the target answers, but as no server we know (detection)
     │    ├── AuthError         it refuses our credentials (401/403): fatal at start, no retry mends it
     │    └── ResponseTooLarge  a bounded GET (/metrics) answered with more than its bound
     ├── WorkerError          a probe worker process died: the run is incomplete
     ├── AnalysisError        the measurements do not support the analysis asked for (too few to fit)
     ├── StreamError          a response stream broke the protocol: that request's outcome is stream_error
     │    └── SSEError          the SSE framing itself (a line over the size cap)
     ├── LogLineError         a log line shaped like ours whose values are garbage: counted as malformed
     ├── RecordFileError      a records file (JSON Lines) with a line that does not decode
     └── LaunchError          sweep: a launched server exited, or never became ready

Each is caught at one boundary only: per request (→ an ``Outcome``), per log line (→ a counter), per command
(→ a one-line message and an exit code). Anything else is a bug and crashes loudly.
"""

from __future__ import annotations


class SpecwatchError(Exception):
    pass


class ConfigError(SpecwatchError):
    pass


class UrlError(ConfigError):
    pass


class PromptFileError(ConfigError):
    pass


class TargetError(SpecwatchError):
    pass


class AuthError(TargetError):
    pass


class ResponseTooLarge(TargetError):
    pass


class WorkerError(SpecwatchError):
    pass


class AnalysisError(SpecwatchError):
    pass


class StreamError(SpecwatchError):
    pass


class SSEError(StreamError):
    pass


class LogLineError(SpecwatchError):
    pass


class RecordFileError(SpecwatchError):
    pass


class LaunchError(SpecwatchError):
    pass
