"""Regrading a finished run without its agents (`agentcompass regrade`, docs/regrade.md): each attempt's kept state
(core/kept_state.py) put back into a fresh sandbox of its task's image and the (possibly changed) verifier run, the
verdicts recorded as a new run beside the original, its run.json linking the original."""
