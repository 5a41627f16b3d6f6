#!/bin/sh
# Prepares the stack's shared volumes, as root, before any service writes them:
#   init-volumes.sh OWNER DIR:MODE [DIR:MODE...]
# makes each DIR (with its parents) and gives that directory alone, not what is in it, to OWNER (uid:gid) with MODE.
# Run on every `docker compose up`: it changes nothing on a directory that is already right, and sets back an owner
# or a mode that was changed. A symbolic link in place of a directory is refused.
set -eu
if [ "$#" -lt 2 ]; then
  echo "usage: $0 UID:GID DIR:MODE [DIR:MODE...]" >&2
  exit 2
fi
owner=$1
shift
for spec in "$@"; do
  dir=${spec%:*}
  mode=${spec##*:}
  if [ -z "$dir" ] || [ "$dir" = "$spec" ]; then
    echo "$0: '$spec' is not DIR:MODE" >&2
    exit 2
  fi
  if [ -L "$dir" ]; then
    echo "$0: $dir is a symbolic link; a directory is expected there. Remove it and start again." >&2
    exit 1
  fi
  mkdir -p "$dir"
  chown "$owner" "$dir"
  chmod "$mode" "$dir"
  echo "$dir: $(stat -c '%u:%g %a' "$dir")"
done
