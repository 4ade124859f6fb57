"""Importers: other tools' result files written as ordinary agentcompass results directories, so
`report`, `report --verify`, `view` and `analyze` read them as they read a run's. Nothing here is
imported by the runner or by report/ (importers depend on the results layout, never the reverse)."""
