#!/usr/bin/env bash
# Installs the real servers the tests run against (idempotent, non-interactive):
#   Debian: redis-server + redis-tools, PostgreSQL 15, ZooKeeper 3.8 (Java),
#           etcd-server 3.4 (etcd with its default timing; most tests embed
#           go.etcd.io/etcd/server/v3/embed instead), nodejs + npm;
#   npm:    dynalite@4.0.0 into .tools/ (a DynamoDB-compatible server).
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo

need=()
command -v redis-server >/dev/null || need+=(redis-server)
command -v redis-cli >/dev/null || need+=(redis-tools)
[ -x /usr/lib/postgresql/15/bin/postgres ] || need+=(postgresql-15)
[ -f /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
command -v java >/dev/null || need+=(default-jre-headless)
command -v etcd >/dev/null || need+=(etcd-server)
command -v node >/dev/null || need+=(nodejs)
command -v npm >/dev/null || need+=(npm)
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]} from Debian"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  # Debian may start services on install; the tests start their own on free ports.
  if command -v service >/dev/null; then
    for s in redis-server zookeeper etcd; do $SUDO service "$s" stop >/dev/null 2>&1 || true; done
  fi
fi

# dynalite (DynamoDB-compatible server) from npm, pinned, into .tools/.
if [ ! -f .tools/node_modules/dynalite/cli.js ]; then
  echo "setup: installing dynalite@4.0.0 from npm into .tools/"
  mkdir -p .tools
  (cd .tools && [ -f package.json ] || echo '{"private":true}' > package.json)
  (cd .tools && npm install --silent --no-audit --no-fund dynalite@4.0.0 >/dev/null)
fi

echo "setup: redis-server $(redis-server --version | awk '{print $3}'), postgres $(/usr/lib/postgresql/15/bin/postgres --version | awk '{print $3}'), zookeeper $(ls /usr/share/java/zookeeper-*.jar 2>/dev/null | head -1 | sed 's/.*zookeeper-//; s/\.jar//'), etcd $(etcd --version 2>/dev/null | awk '/etcd Version/{print $3}'), node $(node --version), dynalite $(node -p 'require("./.tools/node_modules/dynalite/package.json").version')"
