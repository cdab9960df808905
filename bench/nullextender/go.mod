module quorum.dev/bench/nullextender

go 1.22
