package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// rssByCommand sums the resident memory (VmRSS, KiB) of the node's processes by command name,
// and counts them. The benchmark runs on the node of the local cluster as root, so it sees
// every pod's processes.
func rssByCommand() (kib map[string]uint64, count map[string]int) {
	kib, count = map[string]uint64{}, map[string]int{}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		comm, err := os.ReadFile(filepath.Join(d, "comm"))
		if err != nil {
			continue
		}
		f, err := os.Open(filepath.Join(d, "status"))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
				n, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				name := strings.TrimSpace(string(comm))
				kib[name] += n
				count[name]++
			}
		}
		_ = f.Close()
	}
	return kib, count
}

// printIdleMemory prints the memory of kube-sandbox's processes per idle pool pod, with pods
// idle pods on the node: each pod's sandbox-execd, and the node agent's share. The egress
// sidecar each pod had before the node agent enforced policies held 15 MiB of its own.
func printIdleMemory(pods int) {
	kib, count := rssByCommand()
	mib := func(k uint64) float64 { return float64(k) / 1024 }
	execd, node := kib["sandbox-execd"], kib["sandbox-node"]
	fmt.Printf("\nMemory (VmRSS) of kube-sandbox's processes with %d idle pool pods on the node:\n\n", pods)
	fmt.Println("| process | count | MiB in all | MiB per idle pod |")
	fmt.Println("|---|---|---|---|")
	fmt.Printf("| sandbox-execd (in each pod) | %d | %.0f | %.1f |\n", count["sandbox-execd"], mib(execd), mib(execd)/float64(max(count["sandbox-execd"], 1)))
	fmt.Printf("| sandbox-node (one per node: egress, DNS proxy, snapshots) | %d | %.0f | %.2f |\n", count["sandbox-node"], mib(node), mib(node)/float64(pods))
	fmt.Printf("| all of kube-sandbox's, per idle pod | | | %.1f |\n", mib(execd)/float64(max(count["sandbox-execd"], 1))+mib(node)/float64(pods))
	var shim uint64
	var shims int
	for name, k := range kib {
		if strings.HasPrefix(name, "containerd-shim") {
			shim += k
			shims += count[name]
		}
	}
	fmt.Printf("| containerd's shims (not ours, for scale) | %d | %.0f | %.1f |\n", shims, mib(shim), mib(shim)/float64(max(shims, 1)))
}
