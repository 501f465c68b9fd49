"""What the test tier asks of property tests: `pytest -m fast` (the inner loop) draws a fifth of the examples
the full suite draws (conftest.py sets FAST when the run selects the fast tier)."""
FAST = False


def examples(n: int) -> int:
    """max_examples for a property test that draws n in the full suite."""
    return max(3, n // 5) if FAST else n
