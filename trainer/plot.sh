#!/bin/sh
# plot.sh - turn an xtrain --log-json file into a PNG: training loss (per
# logged step and per epoch) on the left, train and test accuracy per epoch on
# the right. Needs gnuplot (Debian: gnuplot-nox) and python3 to read JSON.
# usage: trainer/plot.sh LOG.json OUT.png
set -eu
[ $# -eq 2 ] || { echo "usage: $0 LOG.json OUT.png" >&2; exit 2; }
log=$1 out=$2
command -v gnuplot > /dev/null || { echo "plot.sh: gnuplot not found (apt-get install gnuplot-nox)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$log" "$tmp" <<'PY'
import json, sys
log, tmp = sys.argv[1], sys.argv[2]
steps = open(tmp + "/steps.dat", "w")
epochs = open(tmp + "/epochs.dat", "w")
for line in open(log):
    e = json.loads(line)
    if e.get("event") == "step":
        steps.write("%d %g\n" % (e["step"], e["loss"]))
    elif e.get("event") == "epoch":
        epochs.write("%d %d %g %g %g\n" % (e["epoch"] + 1, e["step"], e["loss"],
                                            e["train_acc"], e["test_acc"]))
steps.write("nan nan\n")
PY
gnuplot <<GP
set terminal pngcairo size 1200,450 noenhanced
set output "$out"
set multiplot layout 1,2 title "$log"
set xlabel "update"
set ylabel "training loss"
set grid
plot "$tmp/steps.dat" using 1:2 with lines title "loss (logged steps)", \
     "$tmp/epochs.dat" using 2:3 with linespoints pt 7 title "loss (epoch mean)"
set xlabel "epoch"
set ylabel "accuracy"
set key bottom right
plot "$tmp/epochs.dat" using 1:4 with linespoints pt 7 title "train", \
     "$tmp/epochs.dat" using 1:5 with linespoints pt 7 title "test"
unset multiplot
GP
echo "wrote $out"
