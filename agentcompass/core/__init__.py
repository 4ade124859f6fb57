"""The execution core: config composition and schemas, the registry, tasks, the sandbox contract,
the results store, the scheduler and its worker processes, one trial, one run, and the launch of many.

Arrows point into the core and never out of it: implementations (providers, formats, harnesses, the
gateway) are found by the registry from dotted paths, never imported here by name."""
