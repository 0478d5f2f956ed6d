package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/containerd/containerd/v2/core/images"
	digest "github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// maxConfigBytes bounds the base image's config read into memory: configs are kilobytes; a
// megabyte is a config of thousands of history entries.
const maxConfigBytes = 8 << 20

// baseImage is the container's image for the node's platform: what the snapshot goes on top
// of.
type baseImage struct {
	// Name is the image's name in containerd (the reference the kubelet pulled), and Digest
	// its target's (an index or a manifest).
	Name   string
	Digest digest.Digest
	// Manifest is the manifest for the platform, and Config the bytes of its config.
	Manifest ocispec.Manifest
	Config   []byte
}

// newLayer is the layer of a snapshot: its compressed blob and the digest of its tar (the
// config's diff ID).
type newLayer struct {
	Blob   ocispec.Descriptor
	DiffID digest.Digest
}

// builtImage is a snapshot's config and manifest, ready for the content store.
type builtImage struct {
	Config, Manifest         []byte
	ConfigDesc, ManifestDesc ocispec.Descriptor
	// Size is the manifest's, the config's and all layers' sizes together.
	Size   int64
	Layers []ocispec.Descriptor
}

// manifestLabels are the content labels of the manifest for containerd's garbage collector:
// a manifest in the content store holds its config and layers for as long as it is kept.
func (b *builtImage) manifestLabels() map[string]string {
	l := map[string]string{"containerd.io/gc.ref.content.config": b.ConfigDesc.Digest.String()}
	for i, layer := range b.Layers {
		l[fmt.Sprintf("containerd.io/gc.ref.content.l.%d", i)] = layer.Digest.String()
	}
	return l
}

// dockerToOCILayer maps the Docker layer media types to their OCI equivalents: the bytes are
// the same (a tar, or a gzip of one), and an OCI manifest should name OCI types. Foreign
// layers keep theirs: they are not the same thing as an OCI layer.
var dockerToOCILayer = map[string]string{
	images.MediaTypeDockerSchema2Layer:     ocispec.MediaTypeImageLayer,
	images.MediaTypeDockerSchema2LayerGzip: ocispec.MediaTypeImageLayerGzip,
}

// buildImage makes the snapshot's image: base's config with the layer's diff ID appended to
// rootfs.diff_ids, a history entry for it and the new creation time, and a manifest of base's
// layers and the new one. Fields of the config this code does not know (Docker's
// container_config, a healthcheck) are kept as they were, so the snapshot runs as its base did.
func buildImage(base *baseImage, layer newLayer, created time.Time, createdBy string) (*builtImage, error) {
	if len(base.Manifest.Layers) == 0 {
		return nil, errors.New("the base image has no layers")
	}
	if layer.Blob.Digest == "" || layer.DiffID == "" {
		return nil, errors.New("the new layer has no digest")
	}
	cfg, err := newConfig(base.Config, len(base.Manifest.Layers), layer.DiffID, created, createdBy)
	if err != nil {
		return nil, err
	}
	b := &builtImage{Config: cfg}
	b.ConfigDesc = ocispec.Descriptor{
		MediaType: ocispec.MediaTypeImageConfig,
		Digest:    digest.FromBytes(cfg),
		Size:      int64(len(cfg)),
	}
	layers := make([]ocispec.Descriptor, 0, len(base.Manifest.Layers)+1)
	for _, l := range base.Manifest.Layers {
		if mt, ok := dockerToOCILayer[l.MediaType]; ok {
			l.MediaType = mt
		}
		layers = append(layers, l)
	}
	layers = append(layers, layer.Blob)
	b.Layers = layers
	m := ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    b.ConfigDesc,
		Layers:    layers,
		// Which image the snapshot is of, for whoever inspects it: the standard annotations.
		Annotations: map[string]string{
			ocispec.AnnotationBaseImageName:   base.Name,
			ocispec.AnnotationBaseImageDigest: base.Digest.String(),
			ocispec.AnnotationCreated:         created.UTC().Format(time.RFC3339),
		},
	}
	if b.Manifest, err = json.Marshal(&m); err != nil {
		return nil, err
	}
	b.ManifestDesc = ocispec.Descriptor{
		MediaType: ocispec.MediaTypeImageManifest,
		Digest:    digest.FromBytes(b.Manifest),
		Size:      int64(len(b.Manifest)),
	}
	b.Size = b.ManifestDesc.Size + b.ConfigDesc.Size
	for _, l := range layers {
		b.Size += l.Size
	}
	return b, nil
}

// newConfig is the base config (JSON) with one more layer: diffID appended to
// rootfs.diff_ids, which must have one entry per layer of the base manifest (nLayers), a
// history entry, and created.
func newConfig(base []byte, nLayers int, diffID digest.Digest, created time.Time, createdBy string) ([]byte, error) {
	// Kept as raw fields, so that what is not touched is written back as it was.
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(base, &raw); err != nil {
		return nil, fmt.Errorf("parse the base image's config: %w", err)
	}
	var rootFS ocispec.RootFS
	if err := json.Unmarshal(raw["rootfs"], &rootFS); err != nil {
		return nil, fmt.Errorf("parse the base image's rootfs: %w", err)
	}
	if rootFS.Type != "layers" {
		return nil, fmt.Errorf("the base image's rootfs is of type %q, want \"layers\"", rootFS.Type)
	}
	if len(rootFS.DiffIDs) != nLayers {
		// The new diff ID would not name the new layer.
		return nil, fmt.Errorf("the base image's config has %d diff IDs for %d layers", len(rootFS.DiffIDs), nLayers)
	}
	rootFS.DiffIDs = append(rootFS.DiffIDs, diffID)
	var history []json.RawMessage
	if h, ok := raw["history"]; ok && string(h) != "null" {
		if err := json.Unmarshal(h, &history); err != nil {
			return nil, fmt.Errorf("parse the base image's history: %w", err)
		}
	}
	entry, err := json.Marshal(ocispec.History{Created: &created, CreatedBy: createdBy})
	if err != nil {
		return nil, err
	}
	history = append(history, entry)

	out := maps.Clone(raw)
	for k, v := range map[string]any{"rootfs": rootFS, "history": history, "created": created} {
		if out[k], err = json.Marshal(v); err != nil {
			return nil, err
		}
	}
	return json.Marshal(out)
}
