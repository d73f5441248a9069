package main

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/idlegrid/idlegrid/market/spell"
	"github.com/idlegrid/idlegrid/node/fault"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// The command line's mistakes, each said with what was meant: a
// misspelt command or flag with the nearest one, a flag's bad value with
// the flag, the value and what it takes.

// unknownCommand is the usage error of name, which is no subcommand of
// cmd, naming the subcommand it most likely misspells.
func unknownCommand(cmd *cobra.Command, name string) error {
	if !cmd.HasAvailableSubCommands() {
		return usagef("%s takes no arguments (got %q); see %s --help", cmd.CommandPath(), name, cmd.CommandPath())
	}
	var names []string
	for _, sub := range cmd.Commands() {
		if sub.IsAvailableCommand() {
			names = append(names, sub.Name())
			names = append(names, sub.Aliases...)
		}
	}
	if near := spell.Nearest(name, names); near != "" {
		return usagef("unknown command %q for %q; did you mean %q?", name, cmd.CommandPath(), near)
	}
	return usagef("unknown command %q for %q; see %s --help", name, cmd.CommandPath(), cmd.CommandPath())
}

// withCommandSuggestion turns cobra's own "unknown command" (of a command
// that takes no arguments, or of the root) into unknownCommand's.
func withCommandSuggestion(cmd *cobra.Command, err error) error {
	var name string
	if cmd == nil || !strings.HasPrefix(err.Error(), "unknown command ") {
		return err
	}
	if _, serr := fmt.Sscanf(err.Error(), "unknown command %q", &name); serr != nil {
		return err
	}
	return unknownCommand(cmd, name)
}

// flagError is a usage error for pflag's err on cmd: an unknown flag names
// the one it most likely misspells, a value its flag doesn't take says
// what the flag takes.
func flagError(cmd *cobra.Command, err error) error {
	var missing *pflag.NotExistError
	var invalid *pflag.InvalidValueError
	switch {
	case errors.As(err, &missing) && missing.GetSpecifiedShortnames() == "":
		var names []string
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			if !f.Hidden {
				names = append(names, f.Name)
			}
		})
		if near := spell.Nearest(missing.GetSpecifiedName(), names); near != "" {
			return usagef("%v; did you mean --%s?", err, near)
		}
		return usagef("%v; see %s --help", err, cmd.CommandPath())
	case errors.As(err, &invalid):
		f := invalid.GetFlag()
		return usagef("--%s %s: want %s", f.Name, invalid.GetValue(), flagWants(f))
	}
	return usageError{err}
}

// fieldAsFlag says a request's field that err finds at fault (a
// fault.Field) as the flag of cmd that set it, a usage error: the node
// checks "max_price", the user typed --max-price.
func fieldAsFlag(cmd *cobra.Command, err error) error {
	var f *fault.Field
	if cmd == nil || !errors.As(err, &f) {
		return err
	}
	name := strings.ReplaceAll(f.Name, "_", "-")
	if cmd.Flags().Lookup(name) == nil {
		return err
	}
	return usagef("--%s %s: %s", name, f.Value, f.Want)
}

// flagWants is what a flag of f's type takes.
func flagWants(f *pflag.Flag) string {
	switch f.Value.Type() {
	case "int", "int64", "uint", "uint32", "uint64", "intSlice":
		return "a whole number"
	case "float64", "float32":
		return "a number"
	case "duration":
		return "a duration such as 30s, 5m or 1h30m"
	case "bool":
		return "true or false"
	}
	return "a " + f.Value.Type()
}

// negativeRE is a negative number, which pflag would read as shorthand
// flags ("-1" as -1).
var negativeRE = regexp.MustCompile(`^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$`)

// negativesAsArgs returns args with each negative number that stands
// where an argument goes (not as a flag's value) moved, with the
// arguments after it, behind a "--", where pflag reads it as an argument:
// `config set provider.price -1` reaches the key's check. A line that has
// its own "--" is left as it is.
func negativesAsArgs(root *cobra.Command, args []string) []string {
	if slices.Contains(args, "--") || !slices.ContainsFunc(args, negativeRE.MatchString) {
		return args
	}
	cmd, _, err := root.Find(args)
	if err != nil {
		return args
	}
	lookup := func(long, short string) *pflag.Flag {
		for _, fs := range []*pflag.FlagSet{cmd.Flags(), cmd.InheritedFlags()} {
			if f := fs.Lookup(long); long != "" && f != nil {
				return f
			}
			if f := fs.ShorthandLookup(short); short != "" && f != nil {
				return f
			}
		}
		return nil
	}
	var kept, moved []string
	takesValue := false // the word before is a flag that reads this one
	for _, a := range args {
		switch {
		case takesValue:
			kept, takesValue = append(kept, a), false
		case negativeRE.MatchString(a) && lookup("", a[1:2]) == nil:
			moved = append(moved, a)
		case strings.HasPrefix(a, "--"):
			name, _, hasValue := strings.Cut(a[2:], "=")
			f := lookup(name, "")
			kept, takesValue = append(kept, a), !hasValue && f != nil && f.NoOptDefVal == ""
		case strings.HasPrefix(a, "-") && len(a) > 1:
			f := lookup("", a[len(a)-1:]) // the last of a group reads the next word
			kept, takesValue = append(kept, a), f != nil && f.NoOptDefVal == "" && !strings.Contains(a, "=")
		case len(moved) > 0:
			moved = append(moved, a)
		default:
			kept = append(kept, a)
		}
	}
	if len(moved) == 0 {
		return args
	}
	return append(append(kept, "--"), moved...)
}
