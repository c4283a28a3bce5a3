#!/bin/sh
# check_symbols.sh ARCHIVE SHARED: only studio_* names may be global
# (defined) in libstudio-producer.a and exported by libstudio-producer.so.
# Prints every other name and fails on any.
set -u
archive=$1
shared=$2
bad=0
# nm -g --defined-only: global defined symbols; the lines "file.o:" and blanks are not symbols.
others=$(nm -g --defined-only "$archive" | awk 'NF == 3 {print $3}' | grep -v '^studio_')
n=$(nm -g --defined-only "$archive" | awk 'NF == 3 && $3 ~ /^studio_/ {print $3}' | wc -l)
echo "archive $archive: $n studio_* globals"
if [ -n "$others" ]; then
	echo "FAIL: the archive has global names other than studio_*:"
	echo "$others" | head -100
	bad=1
fi
exported=$(nm -D --defined-only "$shared" | awk 'NF == 3 {print $3}')
n=$(echo "$exported" | grep -c '^studio_')
echo "shared $shared: $n studio_* exported"
others=$(echo "$exported" | grep -v '^studio_')
if [ -n "$others" ]; then
	echo "FAIL: the shared library exports names other than studio_*:"
	echo "$others" | head -100
	bad=1
fi
[ "$n" -ge 12 ] || { echo "FAIL: expected at least the 12 studio_* names of docs/clients.md exported, got $n"; bad=1; }
exit $bad
