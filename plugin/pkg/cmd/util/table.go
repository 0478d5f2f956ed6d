package util

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/rest"
)

// tableAccept asks for the server's table (a meta.k8s.io/v1 Table), as kubectl get does. The
// plain JSON after the comma lets a server that has no table answer with its object, which
// ServerTable refuses with a clear error rather than a content negotiation failure.
const tableAccept = "application/json;as=Table;v=v1;g=meta.k8s.io, application/json"

// ServerTable sends req asking for the server's table of what (the "sandboxes", the "tasks"),
// with include for the rows' objects. With metav1.IncludeMetadata each row's object is decoded as a
// PartialObjectMetadata, for the printer's NAMESPACE column (--all-namespaces) and LABELS
// (--show-labels), which the server's columns do not have. Cells keep integers integers, as
// kubectl decodes tables.
func ServerTable(ctx context.Context, req *rest.Request, what string, include metav1.IncludeObjectPolicy) (*metav1.Table, error) {
	result := req.
		SetHeader("Accept", tableAccept).
		Param("includeObject", string(include)).
		Do(ctx)
	// Error, not Raw's error: it is the server's Status when there is one.
	if err := result.Error(); err != nil {
		return nil, err
	}
	data, err := result.Raw()
	if err != nil {
		return nil, err
	}
	table := &metav1.Table{}
	if err := utiljson.Unmarshal(data, table); err != nil {
		return nil, fmt.Errorf("decode the server's table: %w", err)
	}
	if table.Kind != "Table" {
		return nil, fmt.Errorf("the server sent no table of %s but %q", what, table.APIVersion+" "+table.Kind)
	}
	for i := range table.Rows {
		row := &table.Rows[i]
		if len(row.Object.Raw) == 0 {
			continue
		}
		m := &metav1.PartialObjectMetadata{}
		if err := utiljson.Unmarshal(row.Object.Raw, m); err != nil {
			return nil, fmt.Errorf("decode the metadata of row %d of the server's table: %w", i, err)
		}
		row.Object.Object = m
	}
	return table, nil
}
