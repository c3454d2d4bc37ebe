package server

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// ReportPreview implements AgentService. Previews are being built (issue 23 part 1).
func (a *agentService) ReportPreview(context.Context, *connect.Request[fleetv1.ReportPreviewRequest]) (*connect.Response[fleetv1.ReportPreviewResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, errors.New("previews are not served by this hub yet"))
}

// PreviewBundle implements FleetService.
func (f *fleetService) PreviewBundle(context.Context, *connect.Request[fleetv1.PreviewBundleRequest]) (*connect.Response[fleetv1.PreviewBundleResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, errors.New("previews are not served by this hub yet"))
}

// GetPreview implements FleetService.
func (f *fleetService) GetPreview(context.Context, *connect.Request[fleetv1.GetPreviewRequest]) (*connect.Response[fleetv1.GetPreviewResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, errors.New("previews are not served by this hub yet"))
}
