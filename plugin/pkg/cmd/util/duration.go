package util

import (
	"fmt"
	"time"
)

// WholeSeconds converts the value of a duration flag to the seconds of an API field. It refuses
// values below minimum, and fractions of a second, which the field cannot hold: rounding them
// away would silently change what the user asked for.
func WholeSeconds(flag string, d, minimum time.Duration) (int64, error) {
	if d < minimum {
		return 0, fmt.Errorf("--%s must be at least %ds, got %s", flag, int64(minimum/time.Second), d)
	}
	if d%time.Second != 0 {
		return 0, fmt.Errorf("--%s must be a whole number of seconds, got %s", flag, d)
	}
	return int64(d / time.Second), nil
}
