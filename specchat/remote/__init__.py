"""Remote engines: the target model served by another machine over the OpenAI API (specchat serve, vLLM, SGLang,
or any OpenAI-compatible server), streamed back as the local engine's StepEvents. No Qt.

engine: RemoteEndpoint (connect, models, metrics) and RemoteEngine (stream); metrics: the Prometheus text parser
and the speculative-decoding counters of vLLM and SGLang (alpha and tau around a reply)."""

from .engine import EndpointInfo, RemoteEndpoint, RemoteEngine, RemoteError, RemoteFigures
from .metrics import SpecDecodeCounters, SpecDecodeDelta, delta, parse_prometheus_text

__all__ = ["EndpointInfo", "RemoteEndpoint", "RemoteEngine", "RemoteError", "RemoteFigures", "SpecDecodeCounters",
           "SpecDecodeDelta", "delta", "parse_prometheus_text"]
