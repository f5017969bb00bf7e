set terminal png size 900,560
set grid
set output 'report-out/latency_cdf.png'
set title 'request latency CDF'
set logscale x
set xlabel 'latency (us)'
set ylabel 'fraction of requests'
set key bottom right
plot 'report-out/latency_cdf.dat' index 0 using 1:2 with steps title "train", 'report-out/latency_cdf.dat' index 1 using 1:2 with steps title "count"
unset logscale x
set output 'report-out/throughput.png'
set title 'throughput per phase'
set ylabel 'GB/s'
set xlabel ''
set style fill solid 0.6
set boxwidth 0.6
set xtics rotate by -30
set yrange [0:*]
plot 'report-out/throughput.dat' using 1:3:xtic(2) with boxes notitle
