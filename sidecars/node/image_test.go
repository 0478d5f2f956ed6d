package node

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/google/go-cmp/cmp"
	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

func TestBuildImage(t *testing.T) {
	created := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	baseLayer := ocispec.Descriptor{MediaType: images.MediaTypeDockerSchema2LayerGzip, Digest: digest.FromString("base layer"), Size: 100}
	ociLayer := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: digest.FromString("oci layer"), Size: 50,
		Annotations: map[string]string{"kept": "yes"}}
	layer := newLayer{
		Blob:   ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: digest.FromString("new layer"), Size: 7},
		DiffID: digest.FromString("new tar"),
	}
	dockerConfig := `{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/bin"],"Cmd":["sh"],"Healthcheck":{"Test":["CMD","true"]}},` +
		`"container_config":{"Hostname":"abc"},"created":"2020-01-01T00:00:00Z",` +
		`"history":[{"created":"2020-01-01T00:00:00Z","created_by":"ADD file"},{"created_by":"ENV x","empty_layer":true}],` +
		`"rootfs":{"type":"layers","diff_ids":["` + digest.FromString("base tar").String() + `"]}}`

	tests := []struct {
		name    string
		layers  []ocispec.Descriptor
		config  string
		wantErr string
		// wantLayerTypes are the media types of the new manifest's layers.
		wantLayerTypes []string
		wantDiffIDs    int
		wantHistory    int
	}{
		{
			name: "docker image: layer types become OCI, unknown fields are kept", layers: []ocispec.Descriptor{baseLayer}, config: dockerConfig,
			wantLayerTypes: []string{ocispec.MediaTypeImageLayerGzip, ocispec.MediaTypeImageLayerGzip}, wantDiffIDs: 2, wantHistory: 3,
		},
		{
			name: "OCI image without history", layers: []ocispec.Descriptor{ociLayer, baseLayer},
			config:         `{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":["` + digest.FromString("a").String() + `","` + digest.FromString("b").String() + `"]}}`,
			wantLayerTypes: []string{ocispec.MediaTypeImageLayerGzip, ocispec.MediaTypeImageLayerGzip, ocispec.MediaTypeImageLayerGzip}, wantDiffIDs: 3, wantHistory: 1,
		},
		{
			name: "diff IDs that do not match the layers", layers: []ocispec.Descriptor{baseLayer, ociLayer}, config: dockerConfig,
			wantErr: "1 diff IDs for 2 layers",
		},
		{
			name: "rootfs of another type", layers: []ocispec.Descriptor{baseLayer},
			config: `{"rootfs":{"type":"other","diff_ids":["` + digest.FromString("a").String() + `"]}}`, wantErr: `type "other"`,
		},
		{name: "config that is not JSON", layers: []ocispec.Descriptor{baseLayer}, config: `not json`, wantErr: "parse the base image's config"},
		{name: "no layers", config: dockerConfig, wantErr: "no layers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := &baseImage{Name: "example.com/base:1", Digest: digest.FromString("base index"),
				Manifest: ocispec.Manifest{Layers: tt.layers}, Config: []byte(tt.config)}
			b, err := buildImage(base, layer, created, "snapshot of c")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}

			var m ocispec.Manifest
			if err := json.Unmarshal(b.Manifest, &m); err != nil {
				t.Fatal(err)
			}
			if m.MediaType != ocispec.MediaTypeImageManifest || m.SchemaVersion != 2 {
				t.Errorf("manifest media type %q, schema %d", m.MediaType, m.SchemaVersion)
			}
			if b.ManifestDesc.Digest != digest.FromBytes(b.Manifest) || b.ConfigDesc.Digest != digest.FromBytes(b.Config) || m.Config.Digest != b.ConfigDesc.Digest {
				t.Errorf("descriptors do not name the bytes")
			}
			var gotTypes []string
			for i, l := range m.Layers {
				gotTypes = append(gotTypes, l.MediaType)
				if i < len(tt.layers) && (l.Digest != tt.layers[i].Digest || l.Size != tt.layers[i].Size || !cmp.Equal(l.Annotations, tt.layers[i].Annotations)) {
					t.Errorf("layer %d = %+v, want the base's %+v", i, l, tt.layers[i])
				}
			}
			if diff := cmp.Diff(tt.wantLayerTypes, gotTypes); diff != "" {
				t.Errorf("layer media types (-want +got):\n%s", diff)
			}
			if last := m.Layers[len(m.Layers)-1]; last.Digest != layer.Blob.Digest {
				t.Errorf("top layer %s, want the new one %s", last.Digest, layer.Blob.Digest)
			}
			if m.Annotations[ocispec.AnnotationBaseImageName] != base.Name || m.Annotations[ocispec.AnnotationBaseImageDigest] != base.Digest.String() {
				t.Errorf("annotations %v do not name the base", m.Annotations)
			}
			wantSize := b.ManifestDesc.Size + b.ConfigDesc.Size + layer.Blob.Size
			for _, l := range tt.layers {
				wantSize += l.Size
			}
			if b.Size != wantSize {
				t.Errorf("size %d, want %d", b.Size, wantSize)
			}

			var cfg ocispec.Image
			if err := json.Unmarshal(b.Config, &cfg); err != nil {
				t.Fatal(err)
			}
			if len(cfg.RootFS.DiffIDs) != tt.wantDiffIDs || cfg.RootFS.DiffIDs[len(cfg.RootFS.DiffIDs)-1] != layer.DiffID {
				t.Errorf("diff IDs %v, want %d ending with %s", cfg.RootFS.DiffIDs, tt.wantDiffIDs, layer.DiffID)
			}
			if len(cfg.History) != tt.wantHistory || cfg.History[len(cfg.History)-1].CreatedBy != "snapshot of c" || cfg.History[len(cfg.History)-1].EmptyLayer {
				t.Errorf("history %+v, want %d entries ending with the snapshot's", cfg.History, tt.wantHistory)
			}
			if cfg.Created == nil || !cfg.Created.Equal(created) {
				t.Errorf("created %v, want %v", cfg.Created, created)
			}
			// What the code does not know of the base's config is as it was.
			var gotRaw, baseRaw map[string]json.RawMessage
			_ = json.Unmarshal(b.Config, &gotRaw)
			_ = json.Unmarshal([]byte(tt.config), &baseRaw)
			for k, v := range baseRaw {
				if k == "rootfs" || k == "history" || k == "created" {
					continue
				}
				if string(gotRaw[k]) != string(v) {
					t.Errorf("config field %s = %s, want the base's %s", k, gotRaw[k], v)
				}
			}
		})
	}
}

func TestManifestLabels(t *testing.T) {
	b := &builtImage{ConfigDesc: ocispec.Descriptor{Digest: digest.FromString("c")},
		Layers: []ocispec.Descriptor{{Digest: digest.FromString("l0")}, {Digest: digest.FromString("l1")}}}
	want := map[string]string{
		"containerd.io/gc.ref.content.config": digest.FromString("c").String(),
		"containerd.io/gc.ref.content.l.0":    digest.FromString("l0").String(),
		"containerd.io/gc.ref.content.l.1":    digest.FromString("l1").String(),
	}
	if diff := cmp.Diff(want, b.manifestLabels()); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
}
