// Package cputime reads the CPU time this process has used: what the benchmarks
// report per operation beside wall time, since on a shared 2-core machine running
// a whole local cluster in one process, CPU is what latency follows.
package cputime
