package server

import (
	"github.com/spf13/cobra"
	"k8s.io/component-base/term"
)

func termSize(cmd *cobra.Command) (int, int, error) {
	w, h, err := term.TerminalSize(cmd.OutOrStdout())
	return w, h, err
}
