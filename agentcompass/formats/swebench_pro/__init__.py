"""SWE-bench Pro: SWE-bench's flow graded by Pro's own per-instance run scripts and parsers."""
