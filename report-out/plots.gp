if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {
  set terminal pngcairo noenhanced size 1000,620 font ',10'
} else {
  set terminal png noenhanced size 1000,620
}
set grid
set output '/tmp/wt-report/report-out/latency_cdf.png'
set title 'request latency CDF per phase: readme-example.yaml on sim, seed 7' . "\n" . 'simulated time: the twin''s modelled network and CPUs, not a measurement'
set logscale x
set xlabel 'latency (us, log scale; calls that took no simulated time at the left edge)'
set ylabel 'fraction of requests'
set yrange [0:1.02]
set key bottom right box opaque
set xrange [1.0693:*]
set logscale x 2
set format x '%g'
plot '/tmp/wt-report/report-out/latency_cdf.dat' index 0 using 1:2 with steps lw 5.00 dt 1 lc rgb '#1b9e77' title 'train', '/tmp/wt-report/report-out/latency_cdf.dat' index 0 using 1:2 with points pt 4 ps 1.1 lc rgb '#1b9e77' notitle, '/tmp/wt-report/report-out/latency_cdf.dat' index 1 using 1:2 with steps lw 2.00 dt 2 lc rgb '#d95f02' title 'count', '/tmp/wt-report/report-out/latency_cdf.dat' index 1 using 1:2 with points pt 6 ps 1.1 lc rgb '#d95f02' notitle
unset logscale x
set xrange [*:*]
set yrange [*:*]
set output '/tmp/wt-report/report-out/throughput.png'
set title 'throughput per phase: readme-example.yaml on sim, seed 7' . "\n" . 'simulated time: the twin''s modelled network and CPUs, not a measurement'
set ylabel 'GB/s (row bytes pushed and pulled / phase time)'
set xlabel ''
set key off
set style fill solid 0.6
set boxwidth 0.6
set xtics rotate by -30 ('train' 0, 'count' 1)
set yrange [0:*]
plot '/tmp/wt-report/report-out/throughput.dat' using 1:2 with boxes lc rgb '#1b9e77' notitle
