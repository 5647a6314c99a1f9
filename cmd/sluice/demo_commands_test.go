package main

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// TestDemoCommandsRunAsPrinted: every command `sluice demo` prints under
// "Try:" is valid shell as printed (README "Set-up": it prints curl lines
// to try), so pasting one never ends in a syntax error.
func TestDemoCommandsRunAsPrinted(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash to check the printed commands with")
	}
	cmd, out, _ := startProcess(t, "demo", "--listen", "127.0.0.1:0", "--log-level", "warn")
	var printed strings.Builder
	for {
		line, err := out.ReadString('\n')
		if err != nil {
			t.Fatalf("demo ended: %v\n%s", err, printed.String())
		}
		if listening.MatchString(line) {
			break
		}
		printed.WriteString(line)
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	_ = cmd.Wait()

	_, try, ok := strings.Cut(printed.String(), "Try:\n")
	if !ok {
		t.Fatalf("no \"Try:\" in the demo's output:\n%s", printed.String())
	}
	var commands []string
	for _, block := range strings.Split(try, "\n\n") { // one command per paragraph
		if block = strings.TrimSpace(block); strings.HasPrefix(block, "curl ") {
			commands = append(commands, block)
		}
	}
	if len(commands) < 3 {
		t.Fatalf("%d commands printed, want 3:\n%s", len(commands), printed.String())
	}
	for _, c := range commands {
		if msg, err := exec.Command(bash, "-n", "-c", c).CombinedOutput(); err != nil {
			t.Errorf("printed command is not valid shell: %v %s\n%s", err, msg, c)
		}
	}
}
