package util

import (
	"testing"
	"time"
)

func TestWholeSeconds(t *testing.T) {
	tests := []struct {
		name    string
		d       time.Duration
		minimum time.Duration
		want    int64
		wantErr string
	}{
		{name: "minutes", d: 10 * time.Minute, minimum: time.Minute, want: 600},
		{name: "exactly the minimum", d: time.Minute, minimum: time.Minute, want: 60},
		{name: "below the minimum", d: 30 * time.Second, minimum: time.Minute, wantErr: "--timeout must be at least 60s, got 30s"},
		{name: "negative", d: -time.Minute, minimum: time.Second, wantErr: "--timeout must be at least 1s, got -1m0s"},
		{name: "fraction of a second", d: 90*time.Second + 500*time.Millisecond, minimum: time.Minute, wantErr: "--timeout must be a whole number of seconds, got 1m30.5s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := WholeSeconds("timeout", tt.d, tt.minimum)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("got %d, %v; want %d", got, err, tt.want)
			}
		})
	}
}
