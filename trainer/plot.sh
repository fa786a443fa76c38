#!/bin/sh
# plot.sh - draw an xtrain --log-json file as a PNG with gnuplot
# (Debian: gnuplot-nox, installed by scripts/setup.sh), three panels against
# updates (optimizer steps), with a tick at the end of every whole epoch:
#   loss:      training loss of each logged step, the training loss of each
#              epoch, and the test loss after each epoch;
#   accuracy:  test (and training) accuracy after each epoch;
#   lr:        the learning rate of each logged step.
# A panel whose events the log lacks (no step events with xtrain's default
# --log-every 0; no epoch events before the first epoch ends) says so.
# usage: trainer/plot.sh LOG.json OUT.png [TITLE]   (TITLE: default the log's name)
set -eu
[ $# -eq 2 ] || [ $# -eq 3 ] || { echo "usage: $0 LOG.json OUT.png [TITLE]" >&2; exit 2; }
log=$1 out=$2 title=${3:-$(basename "$1")}
if [ ! -s "$log" ]; then
  echo "plot.sh: no log at '$log': run xtrain with --log-json $log first" >&2
  exit 1
fi
command -v gnuplot > /dev/null ||
  { echo "plot.sh: gnuplot not found: bash scripts/setup.sh installs it (Debian: gnuplot-nox)" >&2; exit 1; }
command -v python3 > /dev/null ||
  { echo "plot.sh: python3 not found (it reads the JSON log)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$log" "$tmp" <<'PY'
import json, sys
log, tmp = sys.argv[1], sys.argv[2]
steps, epochs = [], []
for number, line in enumerate(open(log, encoding="utf-8"), 1):
    line = line.strip()
    if not line:
        continue
    try:
        e = json.loads(line)
    except ValueError:
        sys.exit(f"plot.sh: {log}:{number} is not a JSON line: is this an xtrain --log-json file?")
    if e.get("event") == "step":
        steps.append((e["step"], e["loss"], e.get("lr", float("nan"))))
    elif e.get("event") == "epoch":
        epochs.append((e["epoch"], e["step"], e["loss"], e.get("test_loss", float("nan")),
                       e["train_acc"], e["test_acc"]))
if not steps and not epochs:
    sys.exit(f"plot.sh: {log} has no step or epoch events: nothing to plot")
with open(tmp + "/steps.dat", "w") as f:
    for s in steps:
        f.write("%d %.9g %.9g\n" % s)
with open(tmp + "/epochs.dat", "w") as f:
    for e in epochs:
        f.write("%d %d %.9g %.9g %.9g %.9g\n" % e)
# The panels, each from the events the log has: with --log-every 0 (the
# default) there are no step events, and before the first epoch ends no
# epoch events. gnuplot fails on a plot whose points are all undefined, so
# a panel without data says why instead.
def empty(why):
    return ('set label 1 "%s" at graph 0.5, graph 0.5 center\n'
            'plot [] [0:1] 2 notitle\nunset label 1\n' % why)
no_steps = "no step events:\\nrun xtrain with --log-every N"
no_epochs = "no epoch has ended"
loss = []
if steps:
    loss.append('"%s/steps.dat" using 1:2 with lines title "train (logged steps)"' % tmp)
if epochs:
    loss.append('"%s/epochs.dat" using 2:3 with linespoints pt 7 title "train (epoch mean)"' % tmp)
    loss.append('"%s/epochs.dat" using 2:4 with linespoints pt 5 title "test"' % tmp)
with open(tmp + "/panels.gp", "w") as f:
    f.write('set ylabel "loss"\n')
    f.write("plot " + ", ".join(loss) + "\n")
    f.write('set ylabel "accuracy"\nset key bottom right\n')
    if epochs:
        f.write('plot "%s/epochs.dat" using 2:6 with linespoints pt 7 title "test", '
                '"%s/epochs.dat" using 2:5 with linespoints pt 5 title "train"\n' % (tmp, tmp))
    else:
        f.write(empty(no_epochs))
    f.write('set ylabel "learning rate"\nset key top right\n')
    if steps:
        f.write('set yrange [0:*]\nset offsets 0, 0, graph 0.1, 0\n')
        f.write('plot "%s/steps.dat" using 1:3 with lines title "lr"\n' % tmp)
    else:
        f.write(empty(no_steps))
# epoch ticks: the update at which each whole epoch ended
ticks = ", ".join('"%d" %d' % (e[0] + 1, e[1]) for e in epochs)
last = max([s[0] for s in steps] + [e[1] for e in epochs])
with open(tmp + "/ticks.gp", "w") as f:
    # one x range for the three panels, so that the epoch ticks line up
    f.write("set xrange [0:%d]\n" % max(last, 1))
    f.write(("set x2tics (%s)\nset x2label \"end of epoch\"\n" % ticks) if ticks else "unset x2tics\n")
PY
gnuplot <<GP
set terminal pngcairo size 1500,450 noenhanced
set output "$out"
set multiplot layout 1,3 title "$title" offset 0,-0.5
set tmargin 6
set xlabel "update"
set link x2
set grid x2tics ytics
set xtics nomirror rotate by -30
load "$tmp/ticks.gp"
load "$tmp/panels.gp"
unset multiplot
GP
echo "wrote $out"
