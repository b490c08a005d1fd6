#!/usr/bin/env bash
# The installed package as a user meets it: `cmake --install` of this build into a fresh prefix,
# then
#  - the files: headers, the library with its SONAME and version links, the CMake package, the
#    pkg-config file;
#  - the exported dynamic symbols: exactly the functions quantjit.h declares (asmjit, cpuinfo and
#    the C++ internals hidden);
#  - test/package/ (c_api_c99_test.c and a C++ program over quantjit.hpp) configured with
#    find_package(quantjit) and built and run; a version the package cannot satisfy refused;
#  - the same two programs compiled with `pkg-config --cflags --libs quantjit`, and run.
# Usage: package_install_test.sh BUILD_DIR TEST_SOURCE_DIR CMAKE C_COMPILER CXX_COMPILER VERSION
set -euo pipefail
build=$1 tests=$2 cmake=$3 cc=$4 cxx=$5 version=$6
major=${version%%.*}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "package_install_test: $*" >&2; exit 1; }

prefix=$work/prefix
"$cmake" --install "$build" --prefix "$prefix" >/dev/null
lib=$(find "$prefix" -name "libquantjit.so.$version" -type f)
[ -n "$lib" ] || fail "libquantjit.so.$version not installed"
libdir=$(dirname "$lib")
for f in "$prefix/include/quantjit/quantjit.h" "$prefix/include/quantjit/quantjit.hpp" \
         "$libdir/libquantjit.so" "$libdir/libquantjit.so.$major" \
         "$libdir/cmake/quantjit/quantjit-config.cmake" \
         "$libdir/cmake/quantjit/quantjit-config-version.cmake" "$libdir/pkgconfig/quantjit.pc"; do
  [ -e "$f" ] || fail "not installed: ${f#$prefix/}"
done
soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = "libquantjit.so.$major" ] || fail "SONAME is '$soname', expected libquantjit.so.$major"

# Exports: the defined dynamic symbols against the functions the public header declares.
nm -D --defined-only "$lib" | awk '{print $3}' | sed 's/@.*//' | sort -u >"$work/exported"
grep -o 'qj_[a-z0-9_]*(' "$prefix/include/quantjit/quantjit.h" | tr -d '(' | sort -u >"$work/declared"
if ! diff "$work/declared" "$work/exported" >"$work/diff"; then
  echo "exported symbols ('>') against the header's functions ('<'):" >&2
  cat "$work/diff" >&2
  fail "libquantjit.so exports something other than the C API"
fi
echo "package_install_test: SONAME $soname, $(wc -l <"$work/exported") exported symbols, all qj_*"

# find_package(quantjit) from a consumer project.
"$cmake" -S "$tests/package" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=Release \
  -DQJ_REQUIRE_VERSION="$version" >"$work/configure.log" 2>&1 ||
  { cat "$work/configure.log" >&2; fail "find_package(quantjit $version) failed"; }
"$cmake" --build "$work/consumer" >"$work/build.log" 2>&1 ||
  { cat "$work/build.log" >&2; fail "the find_package consumer did not build"; }
LD_LIBRARY_PATH="$libdir" "$work/consumer/consumer_c" || fail "consumer_c (find_package) failed: $?"
LD_LIBRARY_PATH="$libdir" "$work/consumer/consumer_cpp" || fail "consumer_cpp (find_package) failed: $?"
if "$cmake" -S "$tests/package" -B "$work/consumer-v" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" -DQJ_REQUIRE_VERSION="$((major + 1)).0" \
    >"$work/configure-v.log" 2>&1; then
  fail "find_package(quantjit $((major + 1)).0) was satisfied by $version"
fi

# pkg-config.
export PKG_CONFIG_PATH="$libdir/pkgconfig"
[ "$(pkg-config --modversion quantjit)" = "$version" ] || fail "pkg-config --modversion is not $version"
"$cc" -std=c99 -Wall -Wextra -pedantic -Werror "$tests/c_api_c99_test.c" -o "$work/pc_c" \
  $(pkg-config --cflags --libs quantjit) || fail "the C program did not build with pkg-config"
"$cxx" -std=c++17 -Wall -Wextra -Werror "$tests/package/consumer.cpp" -o "$work/pc_cpp" \
  $(pkg-config --cflags --libs quantjit) || fail "the C++ program did not build with pkg-config"
LD_LIBRARY_PATH="$libdir" "$work/pc_c" || fail "the pkg-config C program failed: $?"
LD_LIBRARY_PATH="$libdir" "$work/pc_cpp" || fail "the pkg-config C++ program failed: $?"
echo "package_install_test: find_package and pkg-config consumers built and ran"
