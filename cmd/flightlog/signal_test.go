package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flightlog/flightlog/internal/hang"
)

// TestHelperMain is not a test: the signal tests run the real main in a
// child process (the test binary itself, with the command line after "--").
func TestHelperMain(t *testing.T) {
	if os.Getenv("FLIGHTLOG_HELPER_MAIN") != "1" {
		t.Skip("runs only as the child of a signal test")
	}
	i := slices.Index(os.Args, "--")
	os.Args = append([]string{"flightlog"}, os.Args[i+1:]...)
	main()
}

// withoutBackendEnv drops the variables that stand in for backend flags
// (scripts/test.sh exports FLIGHTLOG_S3_ENDPOINT and
// FLIGHTLOG_ETCD_ENDPOINTS for the server tests): the child works on --dir.
func withoutBackendEnv(environ []string) []string {
	g := &globalOpts{}
	fs := flag.NewFlagSet("env", flag.ContinueOnError)
	g.register(fs)
	drop := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { drop[envName(f.Name)] = true })
	var out []string
	for _, kv := range environ {
		if k, _, _ := strings.Cut(kv, "="); !drop[k] {
			out = append(out, kv)
		}
	}
	return out
}

// TestSIGTERMEndsABlockedAppend: an append whose stdin stays open (a
// terminal, a pipe nobody closes) used to ignore SIGTERM for good: the
// signal cancelled a context nothing blocked on. It now stops reading,
// closes the star and exits within the bound; a second signal is not
// needed.
func TestSIGTERMEndsABlockedAppend(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a child process")
	}
	dir := filepath.Join(t.TempDir(), "data")
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperMain$", "--", "append", "-v", "--dir", dir, "--create", "s")
	cmd.Env = append(withoutBackendEnv(os.Environ()), "FLIGHTLOG_HELPER_MAIN=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	// Wait for the star to be open (its INFO line): the signal handler is
	// installed before that.
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var log []string
	bound := hang.After(t) // a regression must not hang the suite
	for opened := false; !opened; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the append exited before its star opened:\n%s", strings.Join(log, "\n"))
			}
			log = append(log, l)
			opened = strings.Contains(l, "star open")
		case <-bound:
			t.Fatalf("the star did not open:\n%s", strings.Join(log, "\n"))
		}
	}
	if _, err := io.WriteString(stdin, "one record, then nothing more\n"); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() {
		for l := range lines {
			log = append(log, l)
		}
		exited <- cmd.Wait()
	}()
	// The check is on what ended the append, not on how long it took (a
	// loaded machine can stretch any span): the append must return its
	// own exit code. Had it still been running when onSignals' bound ran
	// out, onSignals would have said so and exited with the signal's code
	// (TestOnSignals checks that path), whatever the wall clock says.
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() <= 0 {
			t.Fatalf("append after SIGTERM ended with %v; want an exit code of its own (not killed by the signal)\n%s", err, strings.Join(log, "\n"))
		}
		out := strings.Join(log, "\n")
		if ee.ExitCode() == signalCode(syscall.SIGTERM) || strings.Contains(out, "still running") {
			t.Fatalf("append did not end after SIGTERM: exited %d when the %v bound ran out\n%s", ee.ExitCode(), stopBound, out)
		}
		t.Logf("append exited %d after SIGTERM", ee.ExitCode())
	case <-hang.After(t):
		t.Fatalf("append still running after SIGTERM, though the %v bound should have exited it:\n%s", stopBound, strings.Join(log, "\n"))
	}
}

// TestOnSignals: the first signal cancels the command's context and says
// so; a second exits at once; a command that does not end within the bound
// is exited; a command that ends in time is left to return its own code.
func TestOnSignals(t *testing.T) {
	type run struct {
		sigs   chan os.Signal
		ctx    context.Context
		done   chan struct{}
		exited chan int
		out    *lockedWriter
		// returned is closed when onSignals returns
		returned chan struct{}
	}
	start := func(bound time.Duration) run {
		r := run{sigs: make(chan os.Signal, 2), done: make(chan struct{}), exited: make(chan int, 1), out: &lockedWriter{}, returned: make(chan struct{})}
		ctx, cancel := context.WithCancelCause(context.Background())
		r.ctx = ctx
		go func() {
			defer close(r.returned)
			onSignals(r.sigs, cancel, r.done, bound, r.out, func(code int) { r.exited <- code })
		}()
		return r
	}
	wait := func(t *testing.T, ch <-chan int) int {
		t.Helper()
		select {
		case c := <-ch:
			return c
		case <-hang.After(t):
			t.Fatal("no exit")
		}
		return 0
	}

	t.Run("second signal exits at once", func(t *testing.T) {
		r := start(time.Hour)
		r.sigs <- syscall.SIGTERM
		<-r.ctx.Done()
		if !errors.Is(context.Cause(r.ctx), errInterrupted) {
			t.Fatalf("cause %v, want errInterrupted", context.Cause(r.ctx))
		}
		r.sigs <- os.Interrupt
		if c := wait(t, r.exited); c != 128+int(syscall.SIGINT) {
			t.Fatalf("exit code %d, want %d", c, 128+int(syscall.SIGINT))
		}
		if !strings.Contains(r.out.String(), "again to exit at once") {
			t.Fatalf("no notice: %q", r.out.String())
		}
	})
	t.Run("bound exits a command that does not end", func(t *testing.T) {
		r := start(50 * time.Millisecond)
		r.sigs <- syscall.SIGTERM
		if c := wait(t, r.exited); c != 128+int(syscall.SIGTERM) {
			t.Fatalf("exit code %d, want %d", c, 128+int(syscall.SIGTERM))
		}
	})
	t.Run("a command that ends in time returns its own code", func(t *testing.T) {
		r := start(time.Hour)
		r.sigs <- syscall.SIGTERM
		<-r.ctx.Done()
		close(r.done)
		<-r.returned
		select {
		case c := <-r.exited:
			t.Fatalf("exit(%d) although the command returned in time", c)
		default:
		}
	})
}

// TestInterruptibleStdin: a read blocked on stdin ends when the context
// does, with its cause.
func TestInterruptibleStdin(t *testing.T) {
	pr, pw := io.Pipe() // nobody writes: a Read blocks
	defer pw.Close()
	ctx, cancel := context.WithCancelCause(context.Background())
	r := interruptible(ctx, pr)
	got := make(chan error, 1)
	go func() {
		_, err := r.Read(make([]byte, 10))
		got <- err
	}()
	cancel(errInterrupted)
	select {
	case err := <-got:
		if !errors.Is(err, errInterrupted) {
			t.Fatalf("Read = %v, want errInterrupted", err)
		}
	case <-hang.After(t):
		t.Fatal("Read still blocked after the context ended")
	}
}

// TestBenchRealTwice: `bench --model real` twice on one data directory
// used to fail the second time with `stream already exists: "bench-000"`.
func TestBenchRealTwice(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	for i := 0; i < 2; i++ {
		code, _, errs := cli(t, "", "bench", "--model", "real", "--dir", dir, "--duration", "100ms", "--producers", "2", "--streams", "2", "--json")
		if code != 0 {
			t.Fatalf("run %d: exit %d: %s", i+1, code, errs)
		}
	}
}

type lockedWriter struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *lockedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
