"""`agentcompass view`: a local results browser (app.py). It reads the results layout only (run.json,
trials.jsonl, summary.json, the per-attempt files) and never imports the runner, so it can watch a
run another process is writing."""
