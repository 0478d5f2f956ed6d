// Package execd implements sandbox-execd, the agent injected into every sandbox pod. Its wire
// contract (ports, paths, environment, JSON types) is package execdapi.
//
// An init container runs "sandbox-execd install" to copy the static binary into a shared
// emptyDir mounted at execdapi.InstallDir. The user's container then runs "sandbox-execd serve
// -- <entrypoint...>", so any image works unchanged: execd starts the user's entrypoint as its
// child and, next to it, serves exec sessions on the pod IP. sandbox-apiserver streams those
// sessions with the same SPDY/websocket remote command protocol kubelet's streaming server
// speaks, so client-go's remotecommand executors work against execd as they do against
// kubelet.
//
// execd also serves the files API at FilesPath (files.go): downloads with Range support, paged
// listings, atomic uploads, mkdir, delete and move, all resolved through an os.Root so that no
// path or symlink leaves the files root; and HTTP to the sandbox's own servers on loopback at
// execdapi.ProxyPath (proxy.go).
//
// # Trust
//
// The code in a sandbox is hostile and runs next to execd, as root, in the same container: it
// can read execd's memory. So execd holds nothing that opens anything else. It accepts only
// clients with a certificate of the kube-sandbox CA, whose certificates (public) it reads from
// execdapi.EnvClientCA, and authorizes each endpoint by the client's identity (handler.go).
// Its own key it makes at first start (tls.go); sandbox-controller certifies it for this pod,
// after a TokenReview of the pod's projected token proves which pod execd runs in
// (identity.go), so that sandbox-apiserver knows it reached the pod it meant.
//
// # Warm pools and claims
//
// A pod of a warm pool starts "sandbox-execd serve" (with no entrypoint, or the pool template's)
// before any sandbox exists, and serves no exec, files or proxy until the controller claims it
// for a sandbox: POST execdapi.ClaimPath with an execdapi.ClaimRequest (claim.go). The first
// valid claim, atomically:
//
//   - gives execd to the sandbox: exec, files and proxy serve it from then on;
//   - adds the sandbox's env, plus SANDBOX_NAME and SANDBOX_NAMESPACE, to the environment of
//     every later exec (an exec's own env still wins);
//   - starts the sandbox's entrypoint, if any, in the background with that env, in execd's
//     working directory, with execd's stdout and stderr and in a process group of its own. Its
//     exit is logged and ends nothing; when execd shuts down, the group gets SIGTERM, then
//     SIGKILL after a grace period (DefaultEntrypointStopGrace).
//
// A repeated claim (same sandbox UID) answers 200 with the first answer and starts nothing; a
// claim for another sandbox answers 409. A claim whose entrypoint cannot start answers 422 (or
// 500 for a failure that may pass) and leaves execd unclaimed. A pod made for a sandbox
// (direct mode) belongs to it from the start, from its environment.
package execd
