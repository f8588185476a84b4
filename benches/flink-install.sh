# Installs Apache Flink 2.3.0 from the PyPI wheels, once, and sets up the
# variables the Flink side of a benchmark needs. Sourced (not run) by
# benches/nexmark/run.sh and benches/flink-wordcount/run.sh:
#
#   . "$root/benches/flink-install.sh"
#
# The wheels: `apache-flink-libraries` (lib/ with the runtime and the
# connectors, RocksDB included) and `apache-flink` (bin/ and conf/), unzipped
# into one folder, ${WEIR_TOOLS_DIR:-~/.cache/weir/tools}/flink-2.3.0; the
# marker `.installed` there says it is done, so one install serves every
# script. Needs python3 with pip and a reachable Python registry the first
# time; Java 17 to use it.
#
# Sets: tools, flink (the install folder), FLINK_HOME (exported, its home/)
# and opens (the JVM's --add-opens/--add-exports flags, as Flink's own
# launcher passes them from conf/config.yaml, env.java.opts.all); defines
# flink_launcher (below).

tools=${WEIR_TOOLS_DIR:-$HOME/.cache/weir/tools}
flink=$tools/flink-2.3.0

if [ ! -f "$flink/.installed" ]; then
    echo "$(basename "$0"): installing Flink 2.3.0 into $flink" >&2
    mkdir -p "$flink/wheels"
    # apache-flink's wheel is per CPython version; only bin/ and conf/
    # are used from it, so any one of them does.
    python3 -m pip download --quiet --no-deps --only-binary=:all: \
        --python-version 3.11 --platform manylinux2014_x86_64 \
        -d "$flink/wheels" apache-flink-libraries==2.3.0 apache-flink==2.3.0
    for wheel in "$flink"/wheels/*.whl; do
        python3 -m zipfile -e "$wheel" "$flink/unpacked"
    done
    rm -rf "$flink/home"
    mv "$flink/unpacked/pyflink" "$flink/home"
    rm -rf "$flink/unpacked"
    chmod +x "$flink/home/bin/"* 2>/dev/null || true
    touch "$flink/.installed"
fi
export FLINK_HOME=$flink/home

# The JVM flags Flink's own launcher passes (conf/config.yaml,
# env.java.opts.all): the --add-opens/--add-exports Java 17 needs.
opens=$(sed -n 's/^ *all: \(--add-.*\)$/\1/p' "$FLINK_HOME/conf/config.yaml" | head -n 1)
[ -n "$opens" ] || { echo "$(basename "$0"): no env.java.opts.all in $FLINK_HOME/conf/config.yaml" >&2; exit 1; }

# flink_launcher SOURCE.java DIR NAME: compiles SOURCE against Flink's lib/
# into DIR (again only when SOURCE is newer than its class) and writes
# DIR/NAME, a script that runs SOURCE's main class with arguments as given.
flink_launcher() {
    local source=$1 dir=$2 name=$3 class
    class=$(basename "$source" .java)
    mkdir -p "$dir"
    if [ ! -f "$dir/$class.class" ] || [ "$source" -nt "$dir/$class.class" ]; then
        javac -nowarn -cp "$FLINK_HOME/lib/*" -d "$dir" "$source"
    fi
    cat > "$dir/$name" <<LAUNCH
#!/usr/bin/env bash
# $class ARGS..., compiled from $source.
exec java $opens -cp "$dir:$FLINK_HOME/lib/*" $class "\$@"
LAUNCH
    chmod +x "$dir/$name"
}
