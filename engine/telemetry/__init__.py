"""Telemetry: what the engines did, measured and explained: the Prometheus registry, the GPU monitor,
device peaks, the roofline and its report, the Perfetto trace, cost, and KV statistics. Reads events;
never drives an engine."""
