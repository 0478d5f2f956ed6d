package node

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/distribution/reference"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	digest "github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kube-sandbox/kube-sandbox/sidecars/internal/containerdtest"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

const (
	testNamespace   = "k8s.io"
	testSnapshotter = "overlayfs"
	testBaseImage   = "example.com/library/base:1"
)

// privateContainerd is a containerd of the test's own (containerdtest.Start).
func privateContainerd(t *testing.T) *containerd.Client {
	return containerdtest.Start(t, testNamespace)
}

// importBase writes an image of one layer (base.txt, keep.txt), with Docker media types as
// most pulled images have, into the content store, and unpacks it.
func importBase(ctx context.Context, t *testing.T, client *containerd.Client) (containerd.Image, ocispec.Descriptor) {
	t.Helper()
	// In a lease until the image refers to it all: containerd collects content that nothing
	// refers to, and its first collection runs moments after it starts, while this writes.
	ctx, done, err := client.WithLease(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := done(ctx); err != nil {
			t.Errorf("delete the import's lease: %v", err)
		}
	}()
	cs := client.ContentStore()
	write := func(mediaType string, data []byte, labels map[string]string) ocispec.Descriptor {
		desc := ocispec.Descriptor{MediaType: mediaType, Digest: digest.FromBytes(data), Size: int64(len(data))}
		if err := content.WriteBlob(ctx, cs, "import-"+desc.Digest.Encoded(), bytes.NewReader(data), desc, content.WithLabels(labels)); err != nil {
			t.Fatal(err)
		}
		return desc
	}
	gz, diffID := testLayer(t, map[string]string{"base.txt": "base", "keep.txt": "keep"})
	layer := write(images.MediaTypeDockerSchema2LayerGzip, gz, nil)
	cfg, _ := json.Marshal(ocispec.Image{
		Platform: ocispec.Platform{OS: "linux", Architecture: runtime.GOARCH},
		Config:   ocispec.ImageConfig{Cmd: []string{"sh"}, Env: []string{"PATH=/bin"}},
		RootFS:   ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{diffID}},
		History:  []ocispec.History{{CreatedBy: "ADD base"}},
	})
	cfgDesc := write(images.MediaTypeDockerSchema2Config, cfg, nil)
	m, _ := json.Marshal(ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: images.MediaTypeDockerSchema2Manifest,
		Config: cfgDesc, Layers: []ocispec.Descriptor{layer}})
	mDesc := write(images.MediaTypeDockerSchema2Manifest, m, map[string]string{
		"containerd.io/gc.ref.content.config": cfgDesc.Digest.String(),
		"containerd.io/gc.ref.content.l.0":    layer.Digest.String(),
	})
	rec, err := client.ImageService().Create(ctx, images.Image{Name: testBaseImage, Target: mDesc})
	if err != nil {
		t.Fatal(err)
	}
	img := containerd.NewImage(client, rec)
	if err := img.Unpack(ctx, testSnapshotter); err != nil {
		t.Fatalf("unpack: %v", err)
	}
	return img, layer
}

// criLabels are the labels the CRI plugin puts on a pod's container.
func criLabels(uid, ns, pod, ctr string) map[string]string {
	return map[string]string{labelPodUID: uid, labelPodNamespace: ns, labelPodName: pod, labelContainerName: ctr, labelCRIKind: criKindContainer}
}

// newCRIContainer creates a container of img labelled as the CRI plugin does, with a new
// active snapshot; no task (the test commits containers without one).
func newCRIContainer(ctx context.Context, t *testing.T, client *containerd.Client, img containerd.Image, id string, labels map[string]string) {
	t.Helper()
	if _, err := client.NewContainer(ctx, id, containerd.WithImage(img), containerd.WithSnapshotter(testSnapshotter),
		containerd.WithNewSnapshot(id, img), containerd.WithContainerLabels(labels),
		containerd.WithNewSpec(oci.WithProcessArgs("sh"))); err != nil {
		t.Fatal(err)
	}
}

// changeSnapshot mounts the container's active snapshot and does in it what a sandbox's
// program would: write a file, and delete one of the image's.
func changeSnapshot(ctx context.Context, t *testing.T, client *containerd.Client, key string) {
	t.Helper()
	mounts, err := client.SnapshotService(testSnapshotter).Mounts(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	target := t.TempDir()
	if err := mount.All(mounts, target); err != nil {
		t.Fatalf("mount the snapshot: %v", err)
	}
	defer func() {
		if err := mount.UnmountAll(target, 0); err != nil {
			t.Errorf("unmount: %v", err)
		}
	}()
	if err := os.WriteFile(filepath.Join(target, "new.txt"), []byte("written in the sandbox"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(target, "base.txt")); err != nil {
		t.Fatal(err)
	}
}

func allStacks() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}

// TestSnapshotAgainstContainerd commits a container of a private containerd through the real
// TLS server, pushes it to a registry and pulls it back.
func TestSnapshotAgainstContainerd(t *testing.T) {
	client := privateContainerd(t)
	ctx := namespaces.WithNamespace(t.Context(), testNamespace)
	img, baseLayer := importBase(ctx, t, client)

	const uid, ns, pod = "7b0c5a3e-1f7e-4a5e-9d0c-0a1b2c3d4e5f", "team-a", "sb-abc"
	newCRIContainer(ctx, t, client, img, "sandbox-1", criLabels(uid, ns, pod, "sandbox"))
	changeSnapshot(ctx, t, client, "sandbox-1")
	// Decoys: the same container name in another pod, and the pod's pause container.
	newCRIContainer(ctx, t, client, img, "other-pod", criLabels("another-uid", ns, pod, "sandbox"))
	pause := criLabels(uid, ns, pod, "")
	delete(pause, labelContainerName)
	pause[labelCRIKind] = "sandbox"
	newCRIContainer(ctx, t, client, img, "pause", pause)

	reg := newTestRegistry(t, nil)
	registry := reg.config(t, testUser, testPassword)
	committer := NewCommitter(client, testNamespace, registry)
	committer.requireRunningTask = false
	committer.progressInterval = 10 * time.Millisecond
	if err := committer.Healthy(ctx); err != nil {
		t.Errorf("Healthy: %v", err)
	}
	ts := startServer(t, committer, func(s *server) { s.registry = registry; s.maxBytes = 1 << 30 })
	c := ts.client(t, execdapi.ControllerIdentity)
	request := func(tag string) *nodeapi.SnapshotRequest {
		return &nodeapi.SnapshotRequest{PodUID: uid, Namespace: ns, Pod: pod, Container: "sandbox",
			Image: reg.host + "/kube-sandbox/snapshots/" + ns + "/" + pod + ":" + tag}
	}
	// nothingLeft: the agent's lease is gone, and so are the views it made.
	nothingLeft := func(t *testing.T) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			ls, err := client.LeasesService().List(ctx)
			return err == nil && len(ls) == 0, err
		}); err != nil {
			ls, _ := client.LeasesService().List(ctx)
			t.Errorf("leases left in containerd: %v (%v)", ls, err)
		}
		var keys []string
		_ = client.SnapshotService(testSnapshotter).Walk(ctx, func(_ context.Context, i snapshots.Info) error {
			if i.Kind != snapshots.KindCommitted {
				keys = append(keys, i.Name)
			}
			return nil
		})
		if len(keys) != 3 {
			t.Errorf("snapshots %v, want only the three containers' active ones", keys)
		}
	}
	notPushed := func(t *testing.T, image string) {
		t.Helper()
		ref, _ := name.ParseReference(image)
		_, err := remote.Head(ref, remote.WithAuth(&authn.Basic{Username: testUser, Password: testPassword}),
			remote.WithTransport(httpsOnly{reg.srv.Client().Transport}))
		var terr *transport.Error
		if !errors.As(err, &terr) || terr.StatusCode != http.StatusNotFound {
			t.Errorf("%s: %v, want not found", image, err)
		}
	}

	t.Run("a client that hangs up while it pushes leaves nothing under the tag", func(t *testing.T) {
		reg.blockUploads()
		defer func() {
			reg.mu.Lock()
			reg.block = false
			reg.mu.Unlock()
		}()
		rctx, cancel := context.WithCancel(ctx)
		defer cancel()
		resp, err := post(rctx, t, c, ts.url(), request("gone"))
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %s", resp.Status)
		}
		select {
		case <-reg.blocked:
		case <-time.After(10 * time.Second):
			t.Fatal("no upload started")
		}
		cancel()
		_ = resp.Body.Close()
		nothingLeft(t)
		notPushed(t, request("gone").Image)
		// And no upload of it goes on in the agent, holding a connection to the registry.
		if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			return !strings.Contains(allStacks(), "remotes/docker.dockerPusher.push"), nil
		}); err != nil {
			t.Errorf("an upload goes on after its snapshot was cancelled:\n%s", allStacks())
		}
	})

	t.Run("a layer over the limit asked for", func(t *testing.T) {
		r := request("large")
		r.MaxBytes = 10
		resp, err := post(ctx, t, c, ts.url(), r)
		if err != nil {
			t.Fatal(err)
		}
		events, _ := readStream(t, resp.Body)
		_ = resp.Body.Close()
		if last := events[len(events)-1]; last.Type != nodeapi.EventFailed || last.Reason != nodeapi.ReasonSnapshotTooLarge {
			t.Errorf("last event %+v, want Failed %s", last, nodeapi.ReasonSnapshotTooLarge)
		}
		nothingLeft(t)
		notPushed(t, r.Image)
	})

	t.Run("a container without a running task, when one is required", func(t *testing.T) {
		_, err := NewCommitter(client, testNamespace, registry).Find(ctx, request("stopped"))
		if reasonOf(err) != nodeapi.ReasonContainerNotFound {
			t.Errorf("Find: %v, want %s", err, nodeapi.ReasonContainerNotFound)
		}
	})

	t.Run("commit and push", func(t *testing.T) {
		start := time.Now()
		resp, err := post(ctx, t, c, ts.url(), request("r1"))
		if err != nil {
			t.Fatal(err)
		}
		events, _ := readStream(t, resp.Body)
		_ = resp.Body.Close()
		t.Logf("snapshot in %s: %d events", time.Since(start).Round(time.Millisecond), len(events))
		if len(events) < 3 {
			t.Fatalf("events %+v", events)
		}
		last := events[len(events)-1]
		if last.Type != nodeapi.EventDone || last.Result == nil {
			t.Fatalf("last event %+v, want Done", last)
		}
		if events[0].Stage != nodeapi.StageCommitting || events[len(events)-2].Stage != nodeapi.StagePushing ||
			events[len(events)-2].Bytes != last.Result.Size || events[len(events)-2].Total != last.Result.Size {
			t.Errorf("progress %+v, want Committing first and Pushing of all %d bytes last", events, last.Result.Size)
		}
		res := last.Result
		if res.BaseImage != testBaseImage || res.Image != request("r1").Image {
			t.Errorf("result %+v", res)
		}
		nothingLeft(t)

		pulled := reg.pull(t, res.Image)
		if d, _ := pulled.Digest(); d.String() != res.Digest {
			t.Errorf("pulled %s, the agent pushed %s", d, res.Digest)
		}
		layers, err := pulled.Layers()
		if err != nil || len(layers) != 2 {
			t.Fatalf("%d layers (%v), want the base's and the snapshot's", len(layers), err)
		}
		if d, _ := layers[0].Digest(); d.String() != baseLayer.Digest.String() {
			t.Errorf("base layer %s, want the image's %s", d, baseLayer.Digest)
		}
		if size, _ := layers[1].Size(); size != res.LayerSize {
			t.Errorf("top layer %d bytes, result says %d", size, res.LayerSize)
		}
		// The next push of the same base to another repository can mount it from this one.
		info, err := client.ContentStore().Info(ctx, baseLayer.Digest)
		if err != nil {
			t.Fatal(err)
		}
		ref, _ := reference.ParseNormalizedNamed(res.Image)
		host, _, _ := strings.Cut(reference.Domain(ref), ":")
		if got := info.Labels["containerd.io/distribution.source."+host]; !strings.Contains(","+got+",", ","+reference.Path(ref)+",") {
			t.Errorf("the base layer's distribution source for %s is %q, want it to name %s", host, got, reference.Path(ref))
		}
		cfg, err := pulled.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		topDiffID, _ := layers[1].DiffID()
		if len(cfg.RootFS.DiffIDs) != 2 || cfg.RootFS.DiffIDs[1] != topDiffID {
			t.Errorf("diff IDs %v, want the base's and %s", cfg.RootFS.DiffIDs, topDiffID)
		}
		if len(cfg.Config.Cmd) != 1 || cfg.Config.Cmd[0] != "sh" || len(cfg.History) != 2 {
			t.Errorf("config %+v history %+v: want the base's, with one more entry", cfg.Config, cfg.History)
		}

		rc, err := layers[1].Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = rc.Close() }()
		files := map[string]string{}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			data, _ := io.ReadAll(tr)
			files[h.Name] = string(data)
		}
		if files["new.txt"] != "written in the sandbox" {
			t.Errorf("new.txt in the top layer: %q (files %v)", files["new.txt"], files)
		}
		if _, ok := files[".wh.base.txt"]; !ok {
			t.Errorf("no whiteout of base.txt in the top layer (files %v)", files)
		}
		if _, ok := files["keep.txt"]; ok {
			t.Errorf("the top layer has keep.txt, which the sandbox did not change")
		}

		// The container is as it was.
		if info, err := client.SnapshotService(testSnapshotter).Stat(ctx, "sandbox-1"); err != nil || info.Kind != snapshots.KindActive {
			t.Errorf("the container's snapshot: %+v %v", info, err)
		}
	})
}
