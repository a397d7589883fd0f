package helmtest

// Child processes for the tests that run real servers (ingero-fleet, nginx), bounded so a
// test can never hang: each runs in a process group of its own (cleanup ends the group, so
// nginx's workers cannot outlive it), dies with the test binary (Pdeathsig), logs to a file
// rather than a pipe (a pipe held open by a grandchild is what makes exec.Cmd.Wait block
// forever), and every wait has a deadline.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// proc is a started child process and the file it logs to.
type proc struct {
	name   string
	cmd    *exec.Cmd
	log    string
	exited chan struct{} // closed once the process has been waited for
}

// logs is what the process has written so far (stdout and stderr).
func (p *proc) logs() string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	return string(b)
}

// startProc starts bin in its own process group, logging to dir/<name>.log; the test's
// cleanup sends SIGTERM to the group, SIGKILL after 5 s, and waits at most 5 s more.
func startProc(t *testing.T, dir, name, bin string, args ...string) *proc {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		pgid := cmd.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(5 * time.Second):
			t.Logf("%s did not stop within 5 s of SIGTERM; killing its process group", name)
		}
		// Whatever is left of the group (e.g. workers of a master that already exited).
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		select {
		case <-p.exited:
		case <-time.After(5 * time.Second):
			t.Errorf("%s (pid %d) not reaped 5 s after SIGKILL", name, pgid)
		}
	})
	return p
}

// runBounded runs a short command (e.g. `nginx -t`) with a deadline and returns its output.
func runBounded(timeout time.Duration, bin string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	out, err := cmd.CombinedOutput()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return out, fmt.Errorf("%s did not finish within %v", bin, timeout)
	}
	return out, err
}

// freePort is a loopback port free when asked (the caller binds it soon after).
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitPort waits until 127.0.0.1:port accepts a connection, failing the test after
// `within` or as soon as p exits.
func waitPort(t *testing.T, p *proc, port int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 500*time.Millisecond); err == nil {
			c.Close()
			return
		}
		select {
		case <-p.exited:
			t.Fatalf("%s exited before listening on %d:\n%s", p.name, port, p.logs())
		default:
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s did not listen on %d within %v:\n%s", p.name, port, within, p.logs())
}

// testCert is a certificate and its key, parsed and as PEM.
type testCert struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
	kpem []byte
}

// issue makes a certificate from tmpl signed by ca (self-signed when ca is nil).
func issue(t *testing.T, ca *testCert, serial int64, tmpl *x509.Certificate) *testCert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = big.NewInt(serial)
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(time.Hour)
	parent, signer := tmpl, key
	if ca != nil {
		parent, signer = ca.cert, ca.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return &testCert{cert, key,
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})}
}
