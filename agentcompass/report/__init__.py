"""`agentcompass report`: reads results directories only (never the runner).

load (run.json, trials.jsonl, model_calls.jsonl) -> bill (a bill file or Modal's report) ->
split (cost shared by concurrency) -> costs (each trial's cost) -> tables (per setup, trial, task)
-> build (the files) -> charts + page (report.html); verify recomputes and compares.
"""
