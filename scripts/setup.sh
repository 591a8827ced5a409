#!/usr/bin/env bash
# Installs the real servers the tests run against (idempotent, non-interactive):
# redis-server + redis-tools and PostgreSQL 15 from Debian, ZooKeeper (Java) from
# Debian, dynalite from npm. etcd needs nothing: tests embed it (go.etcd.io/etcd/server/v3/embed).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v redis-server >/dev/null || need+=(redis-server)
command -v redis-cli >/dev/null || need+=(redis-tools)
[ -x /usr/lib/postgresql/15/bin/postgres ] || need+=(postgresql-15)
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO=sudo
  echo "setup: installing ${need[*]} from Debian"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  # Debian starts a redis service on install; the tests start their own on free ports.
  if command -v service >/dev/null; then $SUDO service redis-server stop >/dev/null 2>&1 || true; fi
fi
echo "setup: redis-server $(redis-server --version | awk '{print $3}'), postgres $(/usr/lib/postgresql/15/bin/postgres --version | awk '{print $3}')"
