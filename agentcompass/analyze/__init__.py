"""How each attempt of a finished run was solved or failed, and whether it cheated: rule detectors with
evidence and one failure taxonomy (docs/analyze.md). Like report/ and view/, it reads the results layout
only and never runs anything."""
