"""Workshop scenarios: a title, the lanes to compare, a request stream and what to watch, one file each
in assets/scenarios/ (engine/workshop/scenarios/loader.py reads them; runner.py fires them on the service)."""
from .loader import SCENARIO_DIR, ScenarioError, load_scenario, load_scenarios
from .model import Arrival, Fit, Scenario, prompt_ids

__all__ = ["SCENARIO_DIR", "Arrival", "Fit", "Scenario", "ScenarioError", "load_scenario", "load_scenarios",
           "prompt_ids"]
