package util

import (
	"strings"
)

// LongDesc normalizes a command's Long description written as an indented raw string.
func LongDesc(s string) string {
	return strings.Join(dedent(s), "\n")
}

// Examples normalizes a command's Example text written as an indented raw string and indents it
// by two spaces, as kubectl's help does.
func Examples(s string) string {
	lines := dedent(s)
	for i, l := range lines {
		if l != "" {
			lines[i] = "  " + l
		}
	}
	return strings.Join(lines, "\n")
}

// dedent trims blank leading and trailing lines and removes the indentation common to the others.
func dedent(s string) []string {
	lines := strings.Split(s, "\n")
	for len(lines) > 0 && strings.TrimSpace(lines[0]) == "" {
		lines = lines[1:]
	}
	for len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) == "" {
		lines = lines[:len(lines)-1]
	}
	common := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		n := len(l) - len(strings.TrimLeft(l, " \t"))
		if common < 0 || n < common {
			common = n
		}
	}
	for i, l := range lines {
		if strings.TrimSpace(l) == "" {
			lines[i] = ""
			continue
		}
		lines[i] = strings.TrimRight(l[common:], " \t")
	}
	return lines
}
