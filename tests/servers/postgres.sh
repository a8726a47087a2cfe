#!/usr/bin/env bash
# The PostgreSQL server the tests use: Debian's package, one cluster on 127.0.0.1:5432 with trust auth
# for the postgres role (the tests create and drop their own databases through it). Idempotent: a server
# already answering there is left as it is.
set -euo pipefail

if pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
  exit 0
fi
if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
  echo "installing PostgreSQL (Debian's postgresql package)"
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends postgresql
fi
version=$(ls /usr/lib/postgresql | sort -V | tail -1)
if ! pg_lsclusters -h | awk '{print $1, $2}' | grep -qx "$version main"; then
  pg_createcluster "$version" main -p 5432 >/dev/null
fi
conf=/etc/postgresql/$version/main
# the tests' settings in a file of their own, so that the cluster's own postgresql.conf stays Debian's
cat > "$conf/conf.d/absreplay-tests.conf" <<'CONF'
port = 5432
listen_addresses = '127.0.0.1'
max_connections = 200
CONF
cat > "$conf/pg_hba.conf" <<'HBA'
local all all trust
host  all all 127.0.0.1/32 trust
host  all all ::1/128 trust
HBA
echo "starting PostgreSQL $version on 127.0.0.1:5432"
pg_ctlcluster --skip-systemctl-redirect "$version" main start || pg_ctlcluster --skip-systemctl-redirect "$version" main restart
for _ in $(seq 60); do
  pg_isready -h 127.0.0.1 -p 5432 -q && exit 0
  sleep 1
done
echo "error: PostgreSQL did not answer on 127.0.0.1:5432 within 60 s (see /var/log/postgresql/)" >&2
exit 1
