package term

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
)

func TestIsTerminal(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	tests := []struct {
		name string
		v    any
	}{
		{name: "buffer", v: &bytes.Buffer{}},
		{name: "pipe", v: r},
		{name: "nil", v: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if IsTerminal(tt.v) {
				t.Errorf("IsTerminal(%T) = true", tt.v)
			}
		})
	}
}

func TestWithoutTerminal(t *testing.T) {
	tty := TTY{In: &bytes.Buffer{}, Out: &bytes.Buffer{}}
	if q := tty.MonitorSize(context.Background()); q != nil {
		t.Errorf("MonitorSize without a terminal = %v, want nil", q)
	}
	if s := tty.GetSize(); s != nil {
		t.Errorf("GetSize without a terminal = %v, want nil", s)
	}
	want := errors.New("from fn")
	if err := tty.Safe(func() error { return want }); err != want {
		t.Errorf("Safe returned %v, want fn's error", err)
	}
}

func TestWanted(t *testing.T) {
	for _, tc := range []struct {
		name              string
		tty, stdin, quiet bool
		want              bool
		wantSaid          bool
	}{
		{name: "-t without -i", tty: true},
		{name: "-i without -t", stdin: true},
		{name: "-i -t, no terminal as stdin: says why", tty: true, stdin: true, wantSaid: true},
		{name: "-i -t -q, no terminal as stdin: quiet", tty: true, stdin: true, quiet: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var errOut bytes.Buffer
			got := Wanted(tc.tty, tc.stdin, strings.NewReader(""), &errOut, tc.quiet)
			if got != tc.want || (errOut.Len() > 0) != tc.wantSaid {
				t.Errorf("Wanted = %v, said %q; want %v, said anything: %v", got, errOut.String(), tc.want, tc.wantSaid)
			}
		})
	}
}
