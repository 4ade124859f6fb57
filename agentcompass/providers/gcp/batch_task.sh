#!/bin/bash
# One task of an `agentcompass eval --env gcp` GCP Batch job: grade submission $BATCH_TASK_INDEX.
# Its inputs are in GCS under $AGENTCOMPASS_PREFIX/inputs/<index>/ (task.env: the instance image,
# workdir, container environment and the command; files.tar: what goes into the container), its
# outputs go to .../tasks/<index>/, `done` last. A non-zero exit is an infra failure: Batch retries.
# Needs bash, curl, docker and iptables; on GCP the VM's service account token reads and writes the bucket.
set -uo pipefail
index="${BATCH_TASK_INDEX:?set by GCP Batch}"
endpoint="${AGENTCOMPASS_GCS_ENDPOINT:-https://storage.googleapis.com}"
objects="$endpoint/storage/v1/b/$AGENTCOMPASS_BUCKET/o"
uploads="$endpoint/upload/storage/v1/b/$AGENTCOMPASS_BUCKET/o?uploadType=media&name="
auth=()
if [ -z "${AGENTCOMPASS_GCS_ENDPOINT:-}" ]; then  # on GCP: the metadata server's token (an emulator needs none)
  token=$(curl -fsS --retry 5 -H 'Metadata-Flavor: Google' \
    http://metadata.google.internal/computeMetadata/v1/instance/service-accounts/default/token |
    sed -n 's/.*"access_token" *: *"\([^"]*\)".*/\1/p')
  [ -n "$token" ] || { echo "task $index: no access token from the metadata server" >&2; exit 1; }
  auth=(-H "Authorization: Bearer $token")
fi
object() { local name="$AGENTCOMPASS_PREFIX$1"; printf '%s' "${name//\//%2F}"; }
get() { curl -fsS --retry 5 "${auth[@]}" -o "$2" "$objects/$(object "$1")?alt=media"; }
put() { curl -fsS --retry 5 "${auth[@]}" -X POST -H 'Content-Type: application/octet-stream' \
          --data-binary "@$2" "$uploads$(object "$1")" >/dev/null; }

work=$(mktemp -d)
container="agentcompass-batch-${AGENTCOMPASS_JOB:-job}-$index"
# Batch runs the next task on the same VM: leave its disk as it was, the image this task pulled removed too.
pulled=""
trap 'docker rm -f "$container" >/dev/null 2>&1; [ -n "$pulled" ] && docker rmi -f "$pulled" >/dev/null 2>&1; rm -rf "$work"' EXIT
get "inputs/$index/task.env" "$work/task.env" && get "inputs/$index/files.tar" "$work/files.tar" ||
  { echo "task $index: cannot fetch its inputs" >&2; exit 1; }
# shellcheck source=/dev/null
. "$work/task.env"  # IMAGE, WORKDIR, CONTAINER_ENV (docker run arguments), COMMAND, OUTPUTS
if ! docker image inspect "$IMAGE" >/dev/null 2>&1; then
  docker pull -q "$IMAGE" >/dev/null || { echo "task $index: cannot pull $IMAGE" >&2; exit 1; }
  pulled="$IMAGE"
fi
docker rm -f "$container" >/dev/null 2>&1  # a retried task's leftover
# The grading container must not reach the metadata server (the VM's identity and its account's token), as on trial
# VMs: its packets there are dropped (DOCKER-USER) before it starts, and it never starts when they cannot be. In a
# runner container the rule goes into the VM's network namespace through a privileged helper of the runner image.
if [ -n "${AGENTCOMPASS_RUNNER_IMAGE:-}" ]; then
  block_metadata() { docker run --rm --privileged --network host --entrypoint /bin/bash "$AGENTCOMPASS_RUNNER_IMAGE" \
                       -c @METADATA_BLOCK_QUOTED@; }
else
  block_metadata() { @METADATA_BLOCK@; }
fi
block_metadata >/dev/null 2>&1 || { echo "task $index: cannot block the metadata server from containers" >&2; exit 1; }
docker run -d --name "$container" --label "agentcompass-batch=${AGENTCOMPASS_JOB:-job}" --init -w "$WORKDIR" \
  "${CONTAINER_ENV[@]}" --entrypoint /bin/sh "$IMAGE" -c 'trap "exit 0" TERM INT; while :; do sleep 3600 & wait $!; done' \
  >/dev/null || { echo "task $index: cannot start $IMAGE" >&2; exit 1; }
docker cp - "$container:/" <"$work/files.tar" >/dev/null || { echo "task $index: cannot copy its files in" >&2; exit 1; }
started=$(date +%s)
docker exec "$container" bash -c "$COMMAND" || { echo "task $index: grading failed (exit $?)" >&2; exit 1; }
mkdir -p "$work/out"
docker cp "$container:$OUTPUTS/." "$work/out" >/dev/null || { echo "task $index: no outputs" >&2; exit 1; }
echo $(($(date +%s) - started)) >"$work/out/seconds"
for file in "$work"/out/*; do
  put "tasks/$index/${file##*/}" "$file" || { echo "task $index: cannot upload ${file##*/}" >&2; exit 1; }
done
echo done >"$work/done" && put "tasks/$index/done" "$work/done"
