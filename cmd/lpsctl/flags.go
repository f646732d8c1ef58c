package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"

	"nodehotfix/internal/duration"
)

// annotationConn marks the connection flags, which usage lists apart.
const annotationConn = "lpsctl/conn"

// Output formats of -o.
const (
	formatText = "text"
	formatJSON = "json"
	formatYAML = "yaml"
)

// outputFlags are -o and its alias --json.
type outputFlags struct {
	format string
	json   bool
}

func (o *outputFlags) register(fs *pflag.FlagSet) {
	fs.StringVarP(&o.format, "output", "o", formatText, "output `format`: text, json or yaml (schemas in the manual)")
	fs.BoolVar(&o.json, "json", false, "same as -o json")
}

// resolve checks the flags once parsed and settles the format.
func (o *outputFlags) resolve(fs *pflag.FlagSet) error {
	switch o.format {
	case formatText, formatJSON, formatYAML:
	default:
		return usagef("-o %q: want text, json or yaml", o.format)
	}
	if o.json {
		if o.format != formatJSON && fs.Changed("output") {
			return usagef("--json and -o %s disagree; give one", o.format)
		}
		o.format = formatJSON
	}
	return nil
}

// structured reports whether the output is a document (JSON or YAML)
// rather than text for people.
func (o *outputFlags) structured() bool { return o.format != formatText }

// write prints v as the chosen document format; text is the caller's.
func (o *outputFlags) write(w io.Writer, v any) error {
	if o.format == formatYAML {
		// Every document starts with ---, so a watch's stream splits.
		if _, err := io.WriteString(w, "---\n"); err != nil {
			return err
		}
		j, err := json.Marshal(v)
		if err != nil {
			return err
		}
		y, err := yaml.JSONToYAML(j)
		if err != nil {
			return err
		}
		_, err = w.Write(y)
		return err
	}
	return writeJSON(w, v)
}

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// preRun returns a PreRunE that settles the output flags, so every
// command checks -o before it does anything.
func (o *outputFlags) preRun() func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error { return o.resolve(cmd.Flags()) }
}

// durationValue is a time.Duration flag that also takes days ("30d",
// "1d12h"), since release lifetimes and bake times are counted in them.
type durationValue struct{ d *time.Duration }

func newDuration(fs *pflag.FlagSet, p *time.Duration, name string, def time.Duration, usage string) {
	*p = def
	fs.Var(durationValue{p}, name, usage)
}

func (v durationValue) String() string {
	if v.d == nil || *v.d == 0 {
		return "0" // what pflag takes for an unset default
	}
	return duration.Format(*v.d)
}

func (v durationValue) Type() string { return "duration" }

func (v durationValue) Set(s string) error {
	d, err := duration.Parse(s)
	if err != nil {
		return err
	}
	*v.d = d
	return nil
}

// intValue is an integer flag with a range, whose error says the range.
type intValue struct {
	p        *int64
	min, max int64
}

func newInt(fs *pflag.FlagSet, p *int64, name string, def, lo, hi int64, usage string) {
	*p = def
	fs.Var(&intValue{p, lo, hi}, name, usage)
}

func (v *intValue) String() string {
	if v.p == nil {
		return "0"
	}
	return strconv.FormatInt(*v.p, 10)
}

func (v *intValue) Type() string { return "int" }

func (v *intValue) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < v.min || n > v.max {
		return fmt.Errorf("want a whole number from %d to %d", v.min, v.max)
	}
	*v.p = n
	return nil
}

// listFlag is a comma-separated list that remembers whether it was set,
// so an explicit empty value can mean "all". Repeating the flag adds to
// the list, as kubectl's do.
type listFlag struct {
	set  bool
	vals []string
}

func (l *listFlag) String() string { return strings.Join(l.vals, ",") }

func (l *listFlag) Type() string { return "list" }

func (l *listFlag) Set(s string) error {
	if !l.set {
		l.vals = nil
	}
	l.set = true
	if s == "" {
		return nil // "" is all
	}
	n := len(l.vals)
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			l.vals = append(l.vals, v)
		}
	}
	if len(l.vals) == n {
		// " " or ",": an unset variable in a script, most likely; only
		// "" widens a scope to all.
		return errors.New(`no values: give a comma-separated list, or "" for all`)
	}
	return nil
}

// aliases returns a normalize function that maps each alias to its flag.
func aliases(pairs map[string]string) func(*pflag.FlagSet, string) pflag.NormalizedName {
	return func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		if to, ok := pairs[name]; ok {
			return pflag.NormalizedName(to)
		}
		return pflag.NormalizedName(name)
	}
}
