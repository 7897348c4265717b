package wire

// MethodDescribe asks a coordinator for a series' type and quantum as its registry
// replicas record them: TypeReq (Key alone) → TypeResp, or CodeUnknownSeries. A backup
// records them so that a restore gives every series its own quantum back.
const MethodDescribe = "tsdb.describe"
