package main

import (
	"testing"
	"time"
)

func TestParseAllocLine(t *testing.T) {
	line := `I1206 13:32:06.356711       1 pooled.go:120] "sandbox allocated" controller="batchsandbox" controllerGroup="control.kube-sandbox.io" controllerKind="BatchSandbox" BatchSandbox="ns-1/a" namespace="ns-1" name="a" reconcileID="2b9e" sandbox="ns-1/a" replicas=1 start="2026-12-06T13:32:06.1Z" listMs=0.52 allocateMs=4.25 policyMs=9 claimMs=12.5 statusMs=20.01 conflicts=2`
	name, l, ok := parseAllocLine(line)
	if !ok || name != "ns-1/a" {
		t.Fatalf("parseAllocLine = %q, %v", name, ok)
	}
	want := allocLine{start: time.Date(2026, 12, 6, 13, 32, 6, 100e6, time.UTC), list: 520 * time.Microsecond, allocate: 4250 * time.Microsecond,
		policy: 9 * time.Millisecond, claim: 12500 * time.Microsecond, status: 20010 * time.Microsecond, conflicts: 2, replicas: 1}
	if !l.start.Equal(want.start) || l.list != want.list || l.allocate != want.allocate || l.policy != want.policy ||
		l.claim != want.claim || l.status != want.status || l.conflicts != want.conflicts || l.replicas != want.replicas {
		t.Errorf("parseAllocLine = %+v, want %+v", *l, want)
	}
	for _, other := range []string{
		`I1206 13:32:06.356711       1 pooled.go:120] "allocated pool pod" pod="x" replica=0`,
		`I1206 13:32:06.356711       1 pooled.go:120] "sandbox allocated" sandbox="ns/a" start="yesterday"`,
	} {
		if _, _, ok := parseAllocLine(other); ok {
			t.Errorf("parseAllocLine(%q) ok", other)
		}
	}
}
