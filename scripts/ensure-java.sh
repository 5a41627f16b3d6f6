#!/usr/bin/env bash
# Makes sure Java 17 or newer runs Spark (spark-submit, and the Spark and Hive services the tests start from pyspark's
# jars). It is found the way Spark's launcher finds it: $JAVA_HOME/bin/java when JAVA_HOME is set, else `java` on the
# PATH. When none is found and we are root, installs Debian's headless JRE (17 where Debian has it, else 21); else
# says what to install. One `java -version` when Java is there.
set -euo pipefail
MINIMUM=17

if [ -n "${JAVA_HOME:-}" ]; then
  java="$JAVA_HOME/bin/java"
  where="JAVA_HOME=$JAVA_HOME"
else
  java=$(command -v java || true)
  where="the PATH"
fi

# The major version of a java binary: "17.0.15" → 17, "1.8.0_412" → 8; empty when it does not run.
major_version() {
  local line version
  line=$("$1" -version 2>&1 | grep -m1 -E 'version "' || true)
  version=${line#*version \"}
  version=${version%%\"*}
  case "$version" in
    1.*) version=${version#1.} ;;
  esac
  version=${version%%[!0-9]*}
  echo "$version"
}

found=""
if [ -n "$java" ] && [ -x "$java" ]; then
  found=$(major_version "$java")
  if [ -n "$found" ] && [ "$found" -ge "$MINIMUM" ]; then
    exit 0
  fi
fi

# A JRE Debian ships: the first of these with an installation candidate.
debian_jre() {
  local package
  for package in openjdk-17-jre-headless openjdk-21-jre-headless openjdk-25-jre-headless; do
    if apt-cache policy "$package" 2>/dev/null | grep -q 'Candidate: [0-9]'; then
      echo "$package"
      return
    fi
  done
}

if [ -n "$found" ]; then
  problem="Spark 4 needs Java $MINIMUM or newer; the java of $where ($java) is Java $found."
elif [ -n "$java" ]; then
  problem="Spark 4 needs Java $MINIMUM or newer; $java (from $where) does not run or is not Java."
else
  problem="Spark 4 needs Java $MINIMUM or newer; no java is on the PATH and JAVA_HOME is not set."
fi

if [ -n "${JAVA_HOME:-}" ]; then
  # Installing a package would not help: Spark would still take JAVA_HOME's java.
  echo "$problem" >&2
  echo "Point JAVA_HOME at a Java $MINIMUM+ installation (e.g. /usr/lib/jvm/java-17-openjdk-amd64), or unset it." >&2
  exit 1
fi

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "$problem" >&2
  echo "Install a headless JRE $MINIMUM+, on Debian: sudo apt-get install -y openjdk-17-jre-headless" >&2
  echo "(openjdk-21-jre-headless where Debian has no 17), or set JAVA_HOME to one." >&2
  exit 1
fi

package=$(debian_jre)
if [ -z "$package" ]; then
  apt-get update -qq
  package=$(debian_jre)
fi
if [ -z "$package" ]; then
  echo "$problem" >&2
  echo "apt has no openjdk-17/21/25-jre-headless package here: install a Java $MINIMUM+ JRE by hand." >&2
  exit 1
fi
echo "$problem Installing Debian's $package."
export DEBIAN_FRONTEND=noninteractive
# A candidate from stale lists may be gone from the mirror: update once and retry.
apt-get install -y -qq --no-install-recommends "$package" >/dev/null \
  || { apt-get update -qq && apt-get install -y -qq --no-install-recommends "$package" >/dev/null; }

java=$(command -v java || true)
found=$([ -n "$java" ] && major_version "$java" || true)
if [ -z "$found" ] || [ "$found" -lt "$MINIMUM" ]; then
  now=${found:+Java $found}
  echo "Installed $package, but \`java\` on the PATH is still ${now:-missing}:" >&2
  echo "choose the new one with" >&2
  echo "  update-alternatives --config java" >&2
  exit 1
fi
echo "Java $found: $(readlink -f "$java")"
