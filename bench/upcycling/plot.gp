# Plot of the upcycling experiment (bench/upcycling/report.sh passes the
# variables): left, the whole history -- the dense pretraining, then the four
# continuations from its last step; right, the continuations alone, where
# the differences are visible. Columns of `curves`: step, tokens,
# total_step, dense, moe-stk, moe-tks, moe-fine.
#   gnuplot -e "out='x.png'; curves='curves.tsv'; pretrain='pretrain.tsv'; pre=600" plot.gp
set terminal pngcairo size 1400,560 font "sans,11"
set output out
set multiplot layout 1,2 title "Upcycling a dense byte-level model into MoE (validation loss, same tokens after the upcycle)"
set grid
set key top right
set style line 1 lc rgb "#222222" lw 2
set style line 2 lc rgb "#d62728" lw 2
set style line 3 lc rgb "#1f77b4" lw 2
set style line 4 lc rgb "#2ca02c" lw 2
set style line 5 lc rgb "#888888" lw 2 dt 2

set title "whole run (the first steps of pretraining are above the frame)"
set xlabel "optimizer step (dense pretraining, then continuation)"
set ylabel "validation loss (nats per byte)"
stats curves using 4:7 nooutput
set yrange [STATS_min_x * 0.97 : STATS_max_x * 1.5]
set arrow 1 from pre, graph 0 to pre, graph 1 nohead dt 3 lc rgb "#888888"
plot pretrain using 1:2 with lines ls 5 title "dense pretraining", \
     curves using 3:4 with lines ls 1 title "dense (continued)", \
     curves using 3:5 with lines ls 2 title "MoE E8 T2 softmax-then-top-k", \
     curves using 3:6 with lines ls 3 title "MoE E8 T2 top-k-then-softmax", \
     curves using 3:7 with lines ls 4 title "MoE E8 G2 T4 (16 experts) softmax-then-top-k"
unset arrow 1
set autoscale y

set title "continuation only"
set xlabel "tokens since the upcycle (millions)"
set format y "%.3f"
plot curves using ($2/1e6):4 with linespoints ls 1 pt 7 ps 0.6 title "dense (continued)", \
     curves using ($2/1e6):5 with linespoints ls 2 pt 7 ps 0.6 title "MoE E8 T2 softmax-then-top-k", \
     curves using ($2/1e6):6 with linespoints ls 3 pt 7 ps 0.6 title "MoE E8 T2 top-k-then-softmax", \
     curves using ($2/1e6):7 with linespoints ls 4 pt 7 ps 0.6 title "MoE E8 G2 T4 softmax-then-top-k"
unset multiplot
