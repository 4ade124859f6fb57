"""`agentcompass report`: reads results directories only (never the runner).

load (run.json, trials.jsonl, model_calls.jsonl of every try) -> bill (a bill file or Modal's report)
-> coverage (the part of it inside the jobs' window) -> split (cost shared by concurrency) -> prices
(hosted tokens x prices) -> costs (each trial's cost, per endpoint) -> tables (per setup, trial, task)
-> build (the files) -> charts + page (report.html); verify recomputes and compares.
"""
