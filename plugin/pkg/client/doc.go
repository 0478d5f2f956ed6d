// Package client is the Go client of kube-sandbox: the one implementation of each sandbox
// operation, which `kubectl sandbox`, its MCP server and the benchmarks call, and which an
// agent's own Go code can import.
//
// A Client acts with the identity of its rest.Config (a kubeconfig's, or a pod's service
// account), so Kubernetes RBAC decides what it may do: a caller that may use sandboxes but
// not pods gets sandboxes and nothing more. Every call takes a context.Context; every error the
// server sends keeps its Kubernetes Status, and the helpers IsNotFound, IsForbidden, IsConflict
// and IsExpired (or errors.Is with ErrNotFound, ErrForbidden, ErrConflict and ErrExpired) sort
// them.
//
// The agent loop, in five calls:
//
//	c, _ := client.NewFromKubeconfig("", "")
//	sb, _ := c.Create(ctx, client.CreateOptions{Pool: "python", Timeout: 10 * time.Minute})
//	defer c.Delete(context.Background(), sb.Name)
//	_ = c.Files(sb.Name).WriteFile(ctx, "/tmp/main.py", []byte("print(6*7)\n"))
//	res, _ := c.Run(ctx, sb.Name, "python3", "/tmp/main.py")
//	fmt.Print(string(res.Stdout)) // 42
//
// The operations, by what they reach:
//   - sandboxes: Create, Get, List, Delete, Wait, WaitReady (a watch, never a poll);
//   - commands: Exec (streams) and Run (buffers, with the exit code);
//   - files: Files (read, write, list, stat, remove, mkdir, watch; io.Reader and io.Writer);
//   - connections: ProxyTransport, ProxyClient and ProxyURL (HTTP and WebSocket servers in a
//     sandbox), Renew, Pause, Resume;
//   - egress: NetworkPolicy, Allow, Deny, UpdateNetworkPolicy, WaitNetworkPolicy;
//   - processes: StartProcess, ListProcesses, GetProcess, SignalProcess, ProcessLog, Attach;
//   - code contexts: RunCode, CreateContext, ListContexts, DeleteContext, InterruptContext;
//   - usage: Stats (one sandbox's replicas) and ListStats (a namespace's, or every one's).
package client
