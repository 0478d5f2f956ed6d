package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	sandboxclient "github.com/kube-sandbox/kube-sandbox/plugin/pkg/client"
)

// The agent loop: create a sandbox from a warm pool, write a program, run it, read what it
// wrote, and delete the sandbox. (The examples need a cluster with kube-sandbox, so `go test`
// compiles them without running them.)
func Example() {
	ctx := context.Background()
	c, err := sandboxclient.NewFromKubeconfig("", "") // $KUBECONFIG, ~/.kube/config or in-cluster
	if err != nil {
		log.Fatal(err)
	}

	// 1. Create from a pool, ready in milliseconds, gone in ten minutes at the latest.
	sb, err := c.Create(ctx, sandboxclient.CreateOptions{Pool: "python", Timeout: 10 * time.Minute, Wait: true})
	if err != nil {
		log.Fatal(err)
	}
	// 5. Delete when done.
	defer func() { _ = c.Delete(context.Background(), sb.Name) }()

	// 2. Write a file.
	files := c.Files(sb.Name)
	if err := files.WriteFile(ctx, "/work/main.py", []byte("open('/work/answer','w').write(str(6*7))\n"), 0); err != nil {
		log.Fatal(err)
	}
	// 3. Run it.
	res, err := c.Run(ctx, sb.Name, "python3", "/work/main.py")
	if err != nil {
		log.Fatal(err)
	}
	if res.ExitCode != 0 {
		log.Fatalf("main.py failed with %d: %s", res.ExitCode, res.Stderr)
	}
	// 4. Read the output.
	answer, _, err := files.ReadFile(ctx, "/work/answer", 0)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(answer))
}

// Code contexts keep their state between runs, as a notebook's cells do.
func ExampleClient_RunCode() {
	ctx := context.Background()
	c, _ := sandboxclient.NewFromKubeconfig("", "")
	_, _ = c.RunCode(ctx, "my-sandbox", sandboxclient.RunCodeOptions{Code: "import math; r = 2"})
	exec, err := c.RunCode(ctx, "my-sandbox", sandboxclient.RunCodeOptions{Code: "math.pi * r ** 2"})
	if err != nil {
		log.Fatal(err)
	}
	if exec.Error != nil {
		log.Fatalf("%s: %s", exec.Error.Name, exec.Error.Value)
	}
	fmt.Println(exec.Text()) // 12.566370614359172
}

// A web server in the sandbox, started in the background and reached through the API server.
func ExampleClient_ProxyClient() {
	ctx := context.Background()
	c, _ := sandboxclient.NewFromKubeconfig("", "")
	if _, err := c.StartProcess(ctx, "my-sandbox", sandboxclient.ProcessCommand("python3 -m http.server 8000")); err != nil {
		log.Fatal(err)
	}
	hc, err := c.ProxyClient("my-sandbox", 0, 8000)
	if err != nil {
		log.Fatal(err)
	}
	resp, err := hc.Get("http://sandbox/") // scheme and host are ignored: the path goes to port 8000
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	fmt.Println(resp.Status)
}

// Errors keep the server's Status and sort with errors.Is.
func ExampleErrForbidden() {
	c, _ := sandboxclient.NewFromKubeconfig("", "")
	_, err := c.Run(context.Background(), "my-sandbox", "true")
	switch {
	case errors.Is(err, sandboxclient.ErrForbidden):
		fmt.Println("RBAC does not let this identity exec into sandboxes:", err)
	case errors.Is(err, sandboxclient.ErrNotFound):
		fmt.Println("no such sandbox")
	case errors.Is(err, sandboxclient.ErrExpired):
		fmt.Println("it expired; create another")
	}
}

// What each replica of a sandbox uses, as its node last read it (at most about 10 s ago).
func ExampleClient_Stats() {
	c, _ := sandboxclient.NewFromKubeconfig("", "")
	stats, err := c.Stats(context.Background(), "my-sandbox")
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range stats.Replicas {
		if r.CPU == nil || r.Memory == nil {
			// No pod now, a node that did not answer, or not read yet: the reason says which.
			fmt.Printf("replica %d: %s: %s\n", r.Replica, r.Reason, r.Message)
			continue
		}
		fmt.Printf("replica %d: %dm CPU, %d MiB of memory\n", r.Replica, r.CPU.UsageNanoCores/1e6, r.Memory.WorkingSetBytes>>20)
	}
}
