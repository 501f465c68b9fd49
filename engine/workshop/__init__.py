"""The workshop: what a presenter runs on top of the service: scenarios, the narration, recordings and
their replay, the load generator, the bundled prompts."""
