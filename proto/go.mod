module kollect.dev/proto

go 1.26.0

require (
	connectrpc.com/connect v1.21.1
	google.golang.org/protobuf v1.36.13-0.20261016172727-e9ee2a76ab8e
)
