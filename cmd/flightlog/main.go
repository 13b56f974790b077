// Command flightlog is the operator's tool for a flightlog deployment:
// append to and read streams, inspect a chain slot, walk a star's chains by
// point lookups, check every ref and extent (fsck), and run a load
// generator with latency models of S3 Standard and S3 Express One Zone.
//
// By default it works on the embedded layout in a local directory
// (--dir, default ./flightlog-data): one subdirectory per bucket
// (standard/, express-a/, express-b/, express-c/) and a bbolt metastore at
// <dir>/meta.db. bbolt allows one process at a time: stop the service that
// embeds the star before using this tool on its directory. Distributed
// deployments use S3 (--s3-endpoint, --s3-bucket, --s3-express-buckets) and
// etcd (--etcd).
//
// Run `flightlog --help` for the commands and flags.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/flightlog/flightlog/loglet"
)

// Exit codes. fsck and walk use exitProblems for "ran, and found problems".
const (
	exitOK       = 0
	exitProblems = 1
	exitCannot   = 2
)

func main() {
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go onSignals(sigs, cancel, done, stopBound, os.Stderr, os.Exit)
	code := run(ctx, os.Args[1:], os.LookupEnv, interruptible(ctx, os.Stdin), os.Stdout, os.Stderr)
	close(done)
	os.Exit(code)
}

// stopBound is how long the CLI waits, after SIGINT or SIGTERM, for the
// command to end (a leader closes its star: it flushes, waits for acks and
// seals) before it exits anyway. A close cut short is a crash as far as the
// chain is concerned: the next owner fences and walks.
const stopBound = 10 * time.Second

// errInterrupted is the cause of the command's context after a signal.
var errInterrupted = errors.New("interrupted")

// onSignals ends the command on a signal: the first cancels its context
// (commands stop, close what they opened and return); if the command has
// not returned within bound, or at a second signal, exit is called at once
// with 128 + the signal's number, as a shell reports a killed process.
func onSignals(sigs <-chan os.Signal, cancel context.CancelCauseFunc, done <-chan struct{}, bound time.Duration, stderr io.Writer, exit func(int)) {
	var first os.Signal
	select {
	case first = <-sigs:
	case <-done:
		return
	}
	fmt.Fprintf(stderr, "flightlog: %v: stopping (up to %v; send it again to exit at once)\n", first, bound)
	cancel(fmt.Errorf("%w by %v", errInterrupted, first))
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case s := <-sigs:
		fmt.Fprintf(stderr, "flightlog: %v again: exiting now (what was not acked may or may not be durable)\n", s)
		exit(signalCode(s))
	case <-t.C:
		fmt.Fprintf(stderr, "flightlog: still running %v after %v: exiting (what was not acked may or may not be durable)\n", bound, first)
		exit(signalCode(first))
	case <-done:
	}
}

// signalCode is the exit code of a process ended by s: 128 + its number.
func signalCode(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return exitCannot
}

// interruptible returns r as a reader whose Read ends with the context's
// cause once ctx ends, even while a Read of r blocks (stdin from a terminal,
// or a pipe nobody writes to or closes): append then stops reading records,
// and ends with what it has. r is first read when the result is (commands
// that take no stdin leave a terminal's input alone).
func interruptible(ctx context.Context, r io.Reader) io.Reader {
	return &ctxReader{ctx: ctx, r: r}
}

type ctxReader struct {
	ctx  context.Context
	r    io.Reader
	once sync.Once
	pr   *io.PipeReader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	c.once.Do(func() {
		pr, pw := io.Pipe()
		c.pr = pr
		go func() {
			_, err := io.Copy(pw, c.r)
			pw.CloseWithError(err) // nil: EOF
		}()
		context.AfterFunc(c.ctx, func() { pw.CloseWithError(context.Cause(c.ctx)) })
	})
	return c.pr.Read(p)
}

// leadership is whether a command leads a star: whether running it beside
// a service that leads the star can take the star from that service.
type leadership int

const (
	// leadsNothing: the command reads the metastore and the buckets (and
	// may write an offset, or a repaired copy) beside a live leader, and
	// never takes a chain over.
	leadsNothing leadership = iota
	// leadsStar: the command opens the star --star names as its leader for
	// the call, taking each chain over as a restart would. It refuses a
	// chain with a live owner unless --takeover, which fences that owner.
	leadsStar
	// leadsOwnStar: the command leads a star of its own (bench: in memory,
	// or a fresh random name on real backends), never the one --star names.
	leadsOwnStar
)

// mark is the leadership column of the command list.
func (l leadership) mark() string {
	switch l {
	case leadsStar:
		return "LEADS"
	case leadsOwnStar:
		return "own"
	}
	return "-"
}

// line is the leadership line of a command's --help.
func (l leadership) line() string {
	switch l {
	case leadsStar:
		return "Leadership: LEADS the star (--star) for the call; refuses a chain with a live owner\n(exit 2) unless --takeover, which fences that owner (a running service is deposed)."
	case leadsOwnStar:
		return "Leadership: leads a star of its own (in memory, or a fresh random name on real\nbackends), never the one --star names: it fences no running leader."
	}
	return "Leadership: leads nothing; runs beside a live leader and fences no one."
}

// command is one subcommand.
type command struct {
	name    string
	args    string // positional arguments, for the usage line
	summary string
	// help, if set, is printed by the command's --help under the summary.
	help string
	// lead says whether the command leads a star (the command list's
	// second column and a line of its --help); TestHelpMarksLeaders
	// checks it against what each command does beside a live owner.
	lead leadership
	// flags adds the command's own flags to fs and returns the function
	// that runs the command with its positional arguments.
	flags func(fs *flag.FlagSet, g *globalOpts) func(ctx context.Context, env *cmdEnv, args []string) int
}

// cmdEnv is what a running command may touch.
type cmdEnv struct {
	g      *globalOpts
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
}

func (e *cmdEnv) errorf(format string, args ...any) {
	fmt.Fprintf(e.stderr, "flightlog: "+format+"\n", args...)
}

// fail reports err and returns exitCannot.
func (e *cmdEnv) fail(err error) int {
	e.errorf("%v", err)
	return exitCannot
}

// failStream reports the error of a call on a named stream and returns its
// exit code: exitProblems when the stream does not exist (the command ran,
// and what it was asked to work on is not there: the operation failed),
// exitCannot for the rest (fail).
func (e *cmdEnv) failStream(err error) int {
	if errors.Is(err, loglet.ErrStreamNotFound) {
		e.errorf("%v", err)
		return exitProblems
	}
	return e.fail(err)
}

var commands = []command{
	{"append", "STREAM", "append records read from stdin (one per line, or --length-prefixed)", "", leadsStar, appendCmd},
	{"read", "STREAM", "print a stream's records (--from N | --from-ts MS | --tail-offset N) [--max N]", readFormatHelp, leadsNothing, readCmd},
	{"tail", "STREAM", "follow a stream: print new records as they are absorbed (Ctrl-C ends)", readFormatHelp, leadsNothing, tailCmd},
	{"streams", "", "list streams by name, from the name index (--prefix P, --start-after NAME, --limit N)", streamsHelp, leadsNothing, streamsCmd},
	{"groups", "STREAM", "consumer groups on a stream and their lag (--group G --reset-to N | --delete to move or drop an offset)", groupsHelp, leadsNothing, groupsCmd},
	{"create", "STREAM", "create a stream (--class standard|express, --retention-age D, --retention-bytes N)", leadHelp, leadsStar, createCmd},
	{"config", "STREAM", "print a stream's options, or change its retention (--retention-age D, --retention-bytes N)", configHelp, leadsNothing, configCmd},
	{"delete", "STREAM", "delete a stream: its record, then its refs and settled objects", leadHelp + deleteHelp, leadsStar, deleteCmd},
	{"trim", "STREAM SEQ", "make a stream's records below SEQ unreadable and reclaim them", leadHelp + trimHelp, leadsStar, trimCmd},
	{"fleet", fleetArgs, "list a fleet's members and stars (placed, led, epoch); drain a member or move a star", fleetHelp, leadsNothing, fleetCmd},
	{"inspect", "KEY|SLOT", "classify a slot's copies from their 60-byte envelopes and dump the footer", inspectHelp, leadsNothing, inspectCmd},
	{"walk", "", "walk a star's chains by point lookups: epoch record, checkpoint, committed slots, cut, trim cursor", "", leadsNothing, walkCmd},
	{"fsck", "", "check that every ref resolves and every extent verifies from at least one copy (exit 0 clean, 1 problems, 2 could not run; --repair re-copies what another copy can)", "", leadsNothing, fsckCmd},
	{"bench", "", "load generator over latency-modelled in-memory buckets (or real backends): ack latency, MB/s, PUTs/GB, $/GB", `The run settles by default, as a star does (--settle-interval, a backend flag:
0 takes the library's default), and transit storage is charged for the bytes
measured held (an Express model run gets an s3-standard Standard set to settle
into). --settle-interval -1ns turns settlement off; transit storage is then
charged for --transit-hours.`, leadsOwnStar, benchCmd},
}

// trimNote says what trim and delete reclaim, and what they leave.
const trimNote = `trim and delete reclaim a stream's refs and settled objects; chain slots are
shared between streams and are reclaimed by settlement, not by either.
`

const helpIntro = `flightlog: operator's tool for flightlog, a durable multi-stream append log
whose write path goes straight to object storage.

Usage:
  flightlog COMMAND [flags] [ARGS]
  flightlog COMMAND --help

Commands (second column: LEADS = leads the star --star names for the call, and
fences a live owner with --takeover; - = leads nothing; own = leads a star of
its own, never --star's):
`

const helpBackends = `
Backends (flags accepted by every command):
  The default is the embedded layout in --dir (default ./flightlog-data): a local
  directory per bucket (standard/, express-a/, express-b/, express-c/) and a bbolt
  metastore at <dir>/meta.db.

  bbolt allows ONE process at a time: the embedded store is for one process. Stop
  the service that embeds the star before using this tool on its directory (the
  tool waits --lock-timeout for the lock, then gives up with exit code 2).

  --s3-endpoint URL with --s3-bucket NAME (Standard) and/or --s3-express-buckets
  A,B,C (Express, K=3) use S3 or an S3-compatible server; --etcd URL[,URL] uses
  etcd as the metastore (otherwise bbolt in --dir; --etcd with no S3 flags keeps
  the buckets in --dir and needs no meta.db). Credentials: --s3-access-key and
  --s3-secret-key, else the SDK's default chain.

  Every backend flag below may be given as an environment variable instead,
  named after it: FLIGHTLOG_ and the flag in capitals, '-' as '_'
  (--s3-endpoint: FLIGHTLOG_S3_ENDPOINT), except --etcd: FLIGHTLOG_ETCD_ENDPOINTS
  and -v: FLIGHTLOG_VERBOSE. A flag given on the command line wins over its
  variable. Command flags (--class, --format, ...) have no variables.

Leadership: append, create, delete and trim lead the star (they take each chain
over, as a restart would). They refuse a chain with a live owner: an epoch
record naming another owner and not sealed by a clean Close (the owner runs, or
crashed: the metastore cannot tell which). --takeover overrides that, fencing
and deposing the owner if it still runs. read, tail, streams, groups, config,
inspect, walk and fsck never lead anything: they read the metastore and the
buckets beside a live leader; groups --reset-to and --delete write a group's
offset, config's flags the stream record, and fsck --repair re-copies damaged
copies, and they lead nothing either. bench leads a star of its own, never
--star's.

Exit codes: 0 success; 1 problems found (fsck, walk) or the operation failed
(a stream that does not exist, in every command); 2 could not run (bad flags,
backend unreachable or in use, a live owner).
`

func usage(w io.Writer) {
	fmt.Fprint(w, helpIntro)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %-5s  %s\n", c.name, c.lead.mark(), c.summary)
	}
	fmt.Fprint(w, "\n"+trimNote)
	fmt.Fprint(w, helpBackends)
	fs := flag.NewFlagSet("flightlog", flag.ContinueOnError)
	(&globalOpts{}).register(fs)
	fs.SetOutput(w)
	fmt.Fprintln(w, "\nBackend and configuration flags:")
	fs.PrintDefaults()
}

// run is the whole program: it parses args, runs one command, and returns
// the process's exit code. ctx ends on Ctrl-C (tail and bench stop there).
// lookupEnv reads the FLIGHTLOG_* variables that stand in for backend flags
// not given (main passes os.LookupEnv; tests pass their own).
func run(ctx context.Context, args []string, lookupEnv func(string) (string, bool), stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitCannot
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return exitOK
	}
	var cmd *command
	for i := range commands {
		if commands[i].name == args[0] {
			cmd = &commands[i]
		}
	}
	if cmd == nil {
		fmt.Fprintf(stderr, "flightlog: unknown command %q\n\n", args[0])
		usage(stderr)
		return exitCannot
	}
	g := &globalOpts{}
	fs := flag.NewFlagSet("flightlog "+cmd.name, flag.ContinueOnError)
	g.register(fs)
	runCmd := cmd.flags(fs, g)
	fs.Usage = func() {
		o := fs.Output()
		fmt.Fprintf(o, "Usage: flightlog %s [flags] %s\n  %s\n\n", cmd.name, cmd.args, cmd.summary)
		if cmd.help != "" {
			fmt.Fprintf(o, "%s\n\n", strings.TrimSpace(cmd.help))
		}
		fmt.Fprintf(o, "%s\n\n", cmd.lead.line())
		fmt.Fprintf(o, "The embedded store (bbolt in --dir) is for one process: stop the service first.\n\nFlags (a backend flag not given is read from the variable named after it):\n")
		fs.PrintDefaults()
	}
	// The flag package prints the usage itself, on -h as on a bad flag:
	// hold it, then send it once, to stdout when help was asked for and to
	// stderr (after the error) otherwise.
	var parseOut bytes.Buffer
	fs.SetOutput(&parseOut)
	pos, err := parseInterspersed(fs, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		stdout.Write(parseOut.Bytes())
		return exitOK
	}
	stderr.Write(parseOut.Bytes())
	fs.SetOutput(stderr)
	if err != nil {
		return exitCannot // flag printed the error and usage above
	}
	if err := g.fromEnv(fs, lookupEnv); err != nil {
		fmt.Fprintf(stderr, "flightlog %s: %v\n", cmd.name, err)
		return exitCannot
	}
	// Arguments in brackets vary; the command checks them.
	want := len(strings.Fields(cmd.args))
	if !strings.HasPrefix(cmd.args, "[") && len(pos) != want {
		fmt.Fprintf(stderr, "flightlog %s: want %d argument(s) (%s), got %d\n", cmd.name, want, cmd.args, len(pos))
		return exitCannot
	}
	return runCmd(ctx, &cmdEnv{g: g, stdin: stdin, stdout: stdout, stderr: stderr}, pos)
}

// parseInterspersed parses flags anywhere among the positional arguments
// ("read STREAM --from 3" as well as "read --from 3 STREAM"); "--" ends
// the flags.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		args = rest
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// isTerminal reports whether w is a terminal: progress goes to stderr only
// then, so piped or captured output stays quiet. It asks the terminal
// driver (term.IsTerminal: an ioctl that only a tty answers), not the file
// mode: /dev/null is a character device too, and is no terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// progress writes a one-line, overwritten status to stderr when it is a
// terminal, and nothing otherwise.
type progress struct {
	w  io.Writer
	on bool
}

func newProgress(w io.Writer) *progress { return &progress{w: w, on: isTerminal(w)} }

func (p *progress) update(format string, args ...any) {
	if p.on {
		fmt.Fprintf(p.w, "\r\033[K"+format, args...)
	}
}

func (p *progress) done() {
	if p.on {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
