"""Task image builds on podman: buildah behind podman's compatible build endpoint.

Where podman differs from docker: there is no BuildKit. The docker CLI's BuildKit (providers/docker/build.py)
talks to a Docker engine only, so podman builds through its own endpoint, which is buildah: it reads
`RUN --mount` and `COPY --chmod`, but buildah before 1.33 (podman 4.3 ships 1.28) rejects heredocs and fetches
no `# syntax=` frontend. The Dockerfile is therefore always built as the docker provider builds for an engine
whose frontend predates heredocs: heredocs rewritten into shell, the syntax line dropped (heredocs.py), and
sent inside the context's archive under a name of its own (the docker SDK's way of sending a Dockerfile from
outside the context names it twice in the request, and podman reads the second: the file's text). The build is
one API call, bounded by build_timeout_s; an interrupt ends it when the call returns.

Nor does podman 4 answer docker's registry probe (`/distribution/NAME/json`: no such route), which the
docker provider asks before the run about a missing image. On podman that question is left to the trial's
pull: a missing image is then each trial's infra error (the pull's own message), not one line before the run.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import IO

from agentcompass.providers.docker.build import BuildRequest, build_legacy
from agentcompass.providers.docker.heredocs import prepared_dockerfile
from agentcompass.providers.docker.images import DockerImages

PREPARED_NAME = ".agentcompass.Dockerfile"  # the prepared Dockerfile's name in the context's archive


class PodmanImages(DockerImages):
    def _probe_registry(self, image: str) -> None:
        """Nothing to ask: podman 4's compatible API has no registry probe (its router answers docker's
        `/distribution/NAME/json` with "not supported", or 404 for a name with a path), so the pull decides."""

    def _build_image(self, request: BuildRequest, log: IO[str]) -> None:
        from docker.utils import tar

        log.write("builder: podman's build endpoint (buildah); heredocs rewritten into shell commands\n")
        with tempfile.TemporaryDirectory(prefix="agentcompass-build-") as scratch:
            path, _ = prepared_dockerfile(request.context / request.dockerfile, None, Path(scratch),
                                          builtin_frontend=True)
            text = path.read_text(encoding="utf-8")
        with tar(str(request.context), exclude=dockerignore(request.context),
                 dockerfile=(PREPARED_NAME, text)) as archive:
            build_legacy(self.client.api, dataclasses.replace(request, dockerfile=PREPARED_NAME), log,
                         self.settings.build_timeout_s, archive=archive)


def dockerignore(context: Path) -> list[str]:
    """The context's .dockerignore patterns, as the engine's own build reads them."""
    ignore = context / ".dockerignore"
    if not ignore.is_file():
        return []
    lines = (line.strip() for line in ignore.read_text(encoding="utf-8", errors="replace").splitlines())
    return [line for line in lines if line and not line.startswith("#")]
