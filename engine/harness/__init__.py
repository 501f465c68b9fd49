"""The harness: what tests and measurements drive the product with, never shipped code's dependency (the layer
test keeps every other layer and pages/ from importing it). The soak (soak.py, its clients and server), the
fuzzer of every entry point (fuzz.py), a hostile remote server (hostile_remote.py), the server's heap report
(heap_watch.py), the app launcher (app_process.py) and the browser-cost run (ui_cost.py)."""
