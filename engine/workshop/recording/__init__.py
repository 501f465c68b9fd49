"""Record the service's events to a file and replay them in the same views without any engine.

    python -m engine.workshop.recording record --scenario "Straggler: continuous vs static" --out run.jsonl.gz
"""
from .format import Recording, load
from .recorder import Recorder, start_recording, stop_recording
from .replayer import SPEED_STEPS, SPEEDS, Replayer, recorded_lanes
from .stage import SHIPPED, play, play_file, play_while_loading, source, stop_replay

__all__ = ["Recording", "load", "Recorder", "start_recording", "stop_recording", "Replayer", "SPEEDS", "SPEED_STEPS", "recorded_lanes",
           "SHIPPED", "play", "play_file", "play_while_loading", "source", "stop_replay"]
