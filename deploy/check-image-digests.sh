#!/bin/sh
# Holds every image the fleet pulls (docker-compose.yml's `image:` lines, the Dockerfiles' FROM
# lines) against the registry: `ok` when a pinned tag still names the pinned digest, `MOVED`
# when it names another one now (a new build to review and pin), `UNPINNED` for a tag without a
# digest, with the digest to pin. Exits 1 unless every image is `ok`. Needs Docker with buildx
# and the registry (deploy/README.md, "Images"). From the project's directory:
#   sh deploy/check-image-digests.sh
set -eu
cd "$(dirname "$0")/.."
status=0
refs=$(sed -n 's/^ *image: *\([^ #]*\).*/\1/p' docker-compose.yml; awk 'toupper($1) == "FROM" { print $2 }' Dockerfile deploy/*.Dockerfile)
for ref in $(printf '%s\n' "$refs" | sort -u); do
  case "$ref" in
    task-subscription-*) continue ;; # built from this repository
  esac
  image=${ref%@*}
  pinned=
  if [ "$image" != "$ref" ]; then pinned=${ref#*@}; fi
  current=$(docker buildx imagetools inspect "$image" --format '{{.Manifest.Digest}}')
  if [ -z "$pinned" ]; then
    echo "UNPINNED $image: pin $image@$current"
    status=1
  elif [ "$pinned" = "$current" ]; then
    echo "ok       $ref"
  else
    echo "MOVED    $image: pinned $pinned, the tag names $current now"
    status=1
  fi
done
exit $status
