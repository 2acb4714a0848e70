#!/bin/sh
# Installs the Debian packages mesh needs to build, test and benchmark.
# As root it runs apt-get itself; otherwise it prints the one command to run.
# Usage: mk/deps.sh [build|demo|test|bench|all]
set -e
BUILD="gcc make pkg-config libevent-dev libjansson-dev zlib1g-dev libpng-dev libpq-dev"
TEST="clang libclang-rt-14-dev postgresql curl parallel prometheus python3 python3-numpy python3-setuptools python3-pip python3-venv nodejs nginx"
# The gateway tests drive the official OpenAI client (npm) and nginx.  A
# nodejs that bundles npm (NodeSource's) conflicts with Debian's npm package:
# ask for npm only where no npm command exists.
command -v npm >/dev/null 2>&1 || TEST="$TEST npm"
BENCH="parallel beanstalkd findutils wrk haproxy nginx python3 curl"
case "${1:-all}" in
build) PKGS="$BUILD" ;;
demo) PKGS="$BUILD curl" ;; # the meshd demo reads /metrics with curl
test) PKGS="$BUILD $TEST" ;;
bench) PKGS="$BUILD $BENCH" ;;
*) PKGS="$BUILD $TEST $BENCH" ;;
esac
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
	echo "mesh: missing packages:$missing" >&2
	echo "mesh: run: sudo apt-get install -y$missing" >&2
	exit 1
fi
echo "mesh: installing:$missing" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q $missing >/dev/null 2>&1 || {
	apt-get update -q >/dev/null 2>&1
	apt-get install -y -q $missing >/dev/null
}
