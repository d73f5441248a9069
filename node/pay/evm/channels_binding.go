// Code generated - DO NOT EDIT.
// This file is a generated binding and any manual changes will be lost.

package evm

import (
	"context"
	"errors"
	"math/big"
	"strings"
	"time"

	ethereum "github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/accounts/abi/bind"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/event"
)

// Reference imports to suppress errors if they are not otherwise used.
var (
	_ = errors.New
	_ = big.NewInt
	_ = strings.NewReader
	_ = ethereum.NotFound
	_ = bind.Bind
	_ = common.Big1
	_ = types.BloomLookup
	_ = event.NewSubscription
	_ = abi.ConvertType
	_ = time.Tick
	_ = context.Background
)

// PaymentChannelsMetaData contains all meta data concerning the PaymentChannels contract.
var PaymentChannelsMetaData = &bind.MetaData{
	ABI: "[{\"inputs\":[{\"internalType\":\"uint64\",\"name\":\"challengeSeconds\",\"type\":\"uint64\"}],\"stateMutability\":\"nonpayable\",\"type\":\"constructor\"},{\"inputs\":[],\"name\":\"BadParty\",\"type\":\"error\"},{\"inputs\":[],\"name\":\"BadSignature\",\"type\":\"error\"},{\"inputs\":[{\"internalType\":\"uint64\",\"name\":\"closesAt\",\"type\":\"uint64\"}],\"name\":\"ChallengeOpen\",\"type\":\"error\"},{\"inputs\":[{\"internalType\":\"bytes32\",\"name\":\"id\",\"type\":\"bytes32\"}],\"name\":\"ChannelExists\",\"type\":\"error\"},{\"inputs\":[{\"internalType\":\"uint64\",\"name\":\"closesAt\",\"type\":\"uint64\"}],\"name\":\"Closing\",\"type\":\"error\"},{\"inputs\":[{\"internalType\":\"uint256\",\"name\":\"amount\",\"type\":\"uint256\"},{\"internalType\":\"uint256\",\"name\":\"paid\",\"type\":\"uint256\"}],\"name\":\"DecreasingAmount\",\"type\":\"error\"},{\"inputs\":[],\"name\":\"Finished_\",\"type\":\"error\"},{\"inputs\":[],\"name\":\"InvalidShortString\",\"type\":\"error\"},{\"inputs\":[],\"name\":\"NotProvider\",\"type\":\"error\"},{\"inputs\":[],\"name\":\"NotRenter\",\"type\":\"error\"},{\"inputs\":[{\"internalType\":\"uint256\",\"name\":\"amount\",\"type\":\"uint256\"},{\"internalType\":\"uint256\",\"name\":\"deposit\",\"type\":\"uint256\"}],\"name\":\"OverDeposit\",\"type\":\"error\"},{\"inputs\":[{\"internalType\":\"address\",\"name\":\"token\",\"type\":\"address\"}],\"name\":\"SafeERC20FailedOperation\",\"type\":\"error\"},{\"inputs\":[{\"internalType\":\"uint64\",\"name\":\"nonce\",\"type\":\"uint64\"},{\"internalType\":\"uint64\",\"name\":\"last\",\"type\":\"uint64\"}],\"name\":\"StaleVoucher\",\"type\":\"error\"},{\"inputs\":[{\"internalType\":\"string\",\"name\":\"str\",\"type\":\"string\"}],\"name\":\"StringTooLong\",\"type\":\"error\"},{\"inputs\":[{\"internalType\":\"bytes32\",\"name\":\"id\",\"type\":\"bytes32\"}],\"name\":\"UnknownChannel\",\"type\":\"error\"},{\"inputs\":[],\"name\":\"ZeroAmount\",\"type\":\"error\"},{\"anonymous\":false,\"inputs\":[{\"indexed\":true,\"internalType\":\"bytes32\",\"name\":\"id\",\"type\":\"bytes32\"},{\"indexed\":false,\"internalType\":\"uint64\",\"name\":\"closesAt\",\"type\":\"uint64\"}],\"name\":\"CloseStarted\",\"type\":\"event\"},{\"anonymous\":false,\"inputs\":[],\"name\":\"EIP712DomainChanged\",\"type\":\"event\"},{\"anonymous\":false,\"inputs\":[{\"indexed\":true,\"internalType\":\"bytes32\",\"name\":\"id\",\"type\":\"bytes32\"},{\"indexed\":false,\"internalType\":\"uint256\",\"name\":\"paid\",\"type\":\"uint256\"},{\"indexed\":false,\"internalType\":\"uint256\",\"name\":\"refunded\",\"type\":\"uint256\"}],\"name\":\"Finished\",\"type\":\"event\"},{\"anonymous\":false,\"inputs\":[{\"indexed\":true,\"internalType\":\"bytes32\",\"name\":\"id\",\"type\":\"bytes32\"},{\"indexed\":true,\"internalType\":\"address\",\"name\":\"renter\",\"type\":\"address\"},{\"indexed\":true,\"internalType\":\"address\",\"name\":\"provider\",\"type\":\"address\"},{\"indexed\":false,\"internalType\":\"address\",\"name\":\"token\",\"type\":\"address\"},{\"indexed\":false,\"internalType\":\"uint256\",\"name\":\"deposit\",\"type\":\"uint256\"}],\"name\":\"Opened\",\"type\":\"event\"},{\"anonymous\":false,\"inputs\":[{\"indexed\":true,\"internalType\":\"bytes32\",\"name\":\"id\",\"type\":\"bytes32\"},{\"indexed\":false,\"internalType\":\"uint256\",\"name\":\"amount\",\"type\":\"uint256\"},{\"indexed\":false,\"internalType\":\"uint64\",\"name\":\"nonce\",\"type\":\"uint64\"},{\"indexed\":false,\"internalType\":\"uint256\",\"name\":\"paidNow\",\"type\":\"uint256\"}],\"name\":\"Redeemed\",\"type\":\"event\"},{\"anonymous\":false,\"inputs\":[{\"indexed\":true,\"internalType\":\"bytes32\",\"name\":\"id\",\"type\":\"bytes32\"},{\"indexed\":false,\"internalType\":\"uint256\",\"name\":\"amount\",\"type\":\"uint256\"},{\"indexed\":false,\"internalType\":\"uint256\",\"name\":\"deposit\",\"type\":\"uint256\"}],\"name\":\"ToppedUp\",\"type\":\"event\"},{\"inputs\":[],\"name\":\"VOUCHER_TYPEHASH\",\"outputs\":[{\"internalType\":\"bytes32\",\"name\":\"\",\"type\":\"bytes32\"}],\"stateMutability\":\"view\",\"type\":\"function\"},{\"inputs\":[],\"name\":\"challengePeriod\",\"outputs\":[{\"internalType\":\"uint64\",\"name\":\"\",\"type\":\"uint64\"}],\"stateMutability\":\"view\",\"type\":\"function\"},{\"inputs\":[{\"internalType\":\"address\",\"name\":\"renter\",\"type\":\"address\"},{\"internalType\":\"address\",\"name\":\"provider\",\"type\":\"address\"},{\"internalType\":\"address\",\"name\":\"token\",\"type\":\"address\"}],\"name\":\"channelId\",\"outputs\":[{\"internalType\":\"bytes32\",\"name\":\"\",\"type\":\"bytes32\"}],\"stateMutability\":\"view\",\"type\":\"function\"},{\"inputs\":[{\"internalType\":\"bytes32\",\"name\":\"\",\"type\":\"bytes32\"}],\"name\":\"channels\",\"outputs\":[{\"internalType\":\"address\",\"name\":\"renter\",\"type\":\"address\"},{\"internalType\":\"address\",\"name\":\"provider\",\"type\":\"address\"},{\"internalType\":\"address\",\"name\":\"token\",\"type\":\"address\"},{\"internalType\":\"uint256\",\"name\":\"deposit\",\"type\":\"uint256\"},{\"internalType\":\"uint256\",\"name\":\"paid\",\"type\":\"uint256\"},{\"internalType\":\"uint64\",\"name\":\"nonce\",\"type\":\"uint64\"},{\"internalType\":\"uint64\",\"name\":\"closesAt\",\"type\":\"uint64\"},{\"internalType\":\"bool\",\"name\":\"finished\",\"type\":\"bool\"}],\"stateMutability\":\"view\",\"type\":\"function\"},{\"inputs\":[{\"internalType\":\"bytes32\",\"name\":\"id\",\"type\":\"bytes32\"},{\"internalType\":\"uint256\",\"name\":\"amount\",\"type\":\"uint256\"},{\"internalType\":\"uint64\",\"name\":\"nonce\",\"type\":\"uint64\"},{\"internalType\":\"bytes\",\"name\":\"signature\",\"type\":\"bytes\"}],\"name\":\"close\",\"outputs\":[],\"stateMutability\":\"nonpayable\",\"type\":\"function\"},{\"inputs\":[],\"name\":\"eip712Domain\",\"outputs\":[{\"internalType\":\"bytes1\",\"name\":\"fields\",\"type\":\"bytes1\"},{\"internalType\":\"string\",\"name\":\"name\",\"type\":\"string\"},{\"internalType\":\"string\",\"name\":\"version\",\"type\":\"string\"},{\"internalType\":\"uint256\",\"name\":\"chainId\",\"type\":\"uint256\"},{\"internalType\":\"address\",\"name\":\"verifyingContract\",\"type\":\"address\"},{\"internalType\":\"bytes32\",\"name\":\"salt\",\"type\":\"bytes32\"},{\"internalType\":\"uint256[]\",\"name\":\"extensions\",\"type\":\"uint256[]\"}],\"stateMutability\":\"view\",\"type\":\"function\"},{\"inputs\":[{\"internalType\":\"bytes32\",\"name\":\"\",\"type\":\"bytes32\"}],\"name\":\"generation\",\"outputs\":[{\"internalType\":\"uint64\",\"name\":\"\",\"type\":\"uint64\"}],\"stateMutability\":\"view\",\"type\":\"function\"},{\"inputs\":[{\"internalType\":\"bytes32\",\"name\":\"\",\"type\":\"bytes32\"}],\"name\":\"live\",\"outputs\":[{\"internalType\":\"bytes32\",\"name\":\"\",\"type\":\"bytes32\"}],\"stateMutability\":\"view\",\"type\":\"function\"},{\"inputs\":[{\"internalType\":\"address\",\"name\":\"provider\",\"type\":\"address\"},{\"internalType\":\"address\",\"name\":\"token\",\"type\":\"address\"},{\"internalType\":\"uint256\",\"name\":\"amount\",\"type\":\"uint256\"}],\"name\":\"open\",\"outputs\":[{\"internalType\":\"bytes32\",\"name\":\"id\",\"type\":\"bytes32\"}],\"stateMutability\":\"nonpayable\",\"type\":\"function\"},{\"inputs\":[{\"internalType\":\"bytes32\",\"name\":\"id\",\"type\":\"bytes32\"},{\"internalType\":\"uint256\",\"name\":\"amount\",\"type\":\"uint256\"},{\"internalType\":\"uint64\",\"name\":\"nonce\",\"type\":\"uint64\"},{\"internalType\":\"bytes\",\"name\":\"signature\",\"type\":\"bytes\"}],\"name\":\"redeem\",\"outputs\":[],\"stateMutability\":\"nonpayable\",\"type\":\"function\"},{\"inputs\":[{\"internalType\":\"bytes32\",\"name\":\"id\",\"type\":\"bytes32\"}],\"name\":\"startClose\",\"outputs\":[],\"stateMutability\":\"nonpayable\",\"type\":\"function\"},{\"inputs\":[{\"internalType\":\"bytes32\",\"name\":\"id\",\"type\":\"bytes32\"},{\"internalType\":\"uint256\",\"name\":\"amount\",\"type\":\"uint256\"}],\"name\":\"topUp\",\"outputs\":[],\"stateMutability\":\"nonpayable\",\"type\":\"function\"},{\"inputs\":[{\"internalType\":\"bytes32\",\"name\":\"id\",\"type\":\"bytes32\"},{\"internalType\":\"uint256\",\"name\":\"amount\",\"type\":\"uint256\"},{\"internalType\":\"uint64\",\"name\":\"nonce\",\"type\":\"uint64\"}],\"name\":\"voucherDigest\",\"outputs\":[{\"internalType\":\"bytes32\",\"name\":\"\",\"type\":\"bytes32\"}],\"stateMutability\":\"view\",\"type\":\"function\"},{\"inputs\":[{\"internalType\":\"bytes32\",\"name\":\"id\",\"type\":\"bytes32\"}],\"name\":\"withdraw\",\"outputs\":[],\"stateMutability\":\"nonpayable\",\"type\":\"function\"}]",
	Bin: "0x610180604052348015610010575f5ffd5b50604051611ab6380380611ab683398101604081905261002f916101a8565b604080518082018252601181527069646c6567726964206368616e6e656c7360781b602080830191909152825180840190935260018352603160f81b908301529061007a825f610130565b61012052610089816001610130565b61014052815160208084019190912060e052815190820120610100524660a05261011560e05161010051604080517f8b73c3c69bb8fe3d512ecc4cf759cc79239f7b179b0ffacaa9a75d522b39400f60208201529081019290925260608201524660808201523060a08201525f9060c00160405160208183030381529060405280519060200120905090565b60805250503060c0526001600160401b03166101605261038e565b5f60208351101561014b5761014483610162565b905061015c565b816101568482610278565b5060ff90505b92915050565b5f5f829050601f81511115610195578260405163305a27a960e01b815260040161018c9190610336565b60405180910390fd5b80516101a08261036b565b179392505050565b5f602082840312156101b8575f5ffd5b81516001600160401b03811681146101ce575f5ffd5b9392505050565b634e487b7160e01b5f52604160045260245ffd5b600181811c908216806101fd57607f821691505b60208210810361021b57634e487b7160e01b5f52602260045260245ffd5b50919050565b601f821115610273578282111561027357805f5260205f20601f840160051c602085101561024c57505f5b90810190601f840160051c035f5b8181101561026f575f8382015560010161025a565b5050505b505050565b81516001600160401b03811115610291576102916101d5565b6102a58161029f84546101e9565b84610221565b6020601f8211600181146102d7575f83156102c05750848201515b5f19600385901b1c1916600184901b17845561032f565b5f84815260208120601f198516915b8281101561030657878501518255602094850194600190920191016102e6565b508482101561032357868401515f19600387901b60f8161c191681555b505060018360011b0184555b5050505050565b602081525f82518060208401528060208501604085015e5f604082850101526040601f19601f83011684010191505092915050565b8051602080830151919081101561021b575f1960209190910360031b1b16919050565b60805160a05160c05160e051610100516101205161014051610160516116c66103f05f395f81816102f4015261062801525f610ec101525f610e9001525f61108401525f61105c01525f610fb701525f610fe101525f61100b01526116c65ff3fe608060405234801561000f575f5ffd5b50600436106100e5575f3560e01c80638e19899e11610088578063b67644b911610063578063b67644b9146102c9578063c8d53726146102dc578063f3f480d9146102ef578063f4f2704214610316575f5ffd5b80638e19899e1461027c57806393b1d6691461028f57806394739e87146102a2575f5ffd5b8063612e5f4f116100c3578063612e5f4f146101625780637a7ebd7b1461017757806384b0196e146102425780638d2705001461025d575f5ffd5b80630b1011f7146100e95780631158c64c1461010f5780633046e7171461014f575b5f5ffd5b6100fc6100f73660046113ab565b610329565b6040519081526020015b60405180910390f35b61013761011d3660046113eb565b60036020525f90815260409020546001600160401b031681565b6040516001600160401b039091168152602001610106565b6100fc61015d366004611418565b6103b9565b610175610170366004611441565b61042b565b005b6101ea6101853660046113eb565b600260208190525f91825260409091208054600182015492820154600383015460048401546005909401546001600160a01b0393841695841694939092169290916001600160401b0380821691600160401b810490911690600160801b900460ff1688565b604080516001600160a01b03998a16815297891660208901529590971694860194909452606085019290925260808401526001600160401b0390811660a08401521660c082015290151560e082015261010001610106565b61024a6104fc565b60405161010697969594939291906114fb565b6100fc61026b3660046113eb565b60046020525f908152604090205481565b61017561028a3660046113eb565b61053e565b61017561029d3660046113eb565b6105ec565b6100fc7f54d38ae0c73917c3ccd83c8681e7d986bbc80e84f86580837a080ad5098869c481565b6101756102d7366004611591565b6106bd565b6101756102ea366004611441565b610792565b6101377f000000000000000000000000000000000000000000000000000000000000000081565b6100fc6103243660046115b1565b610846565b604080516001600160a01b039485166020808301919091529385168183015291909316606080830191909152835180830390910181526080820184528051908301205f81815260038452849020544660a08401523060c084015260e08301919091526001600160401b03166101008083019190915283518083039091018152610120909101909252815191012090565b604080517f54d38ae0c73917c3ccd83c8681e7d986bbc80e84f86580837a080ad5098869c46020820152908101849052606081018390526001600160401b03821660808201525f906104239060a00160405160208183030381529060405280519060200120610ab0565b949350505050565b5f61043586610ae2565b60018101549091506001600160a01b0316331461046557604051631a40715960e11b815260040160405180910390fd5b81156104ea576005810154600160401b90046001600160401b0316158015906104a257506005810154600160401b90046001600160401b03164210155b156104dc576005810154604051638c61445160e01b8152600160401b9091046001600160401b031660048201526024015b60405180910390fd5b6104ea868287878787610b4c565b6104f48682610d4e565b505050505050565b5f6060805f5f5f606061050d610e89565b610515610eba565b604080515f80825260208201909252600f60f81b9b939a50919850469750309650945092509050565b5f61054882610ae2565b80549091506001600160a01b03163314610575576040516331abab6160e01b815260040160405180910390fd5b6005810154600160401b90046001600160401b031615806105a957506005810154600160401b90046001600160401b031642105b156105de576005810154604051630cbeabf160e01b8152600160401b9091046001600160401b031660048201526024016104d3565b6105e88282610d4e565b5050565b5f6105f682610ee7565b80549091506001600160a01b03163314610623576040516331abab6160e01b815260040160405180910390fd5b61064d7f0000000000000000000000000000000000000000000000000000000000000000426115ff565b6005820180546fffffffffffffffff00000000000000001916600160401b6001600160401b03938416810291909117918290556040519104909116815282907f513c2f7e597098def3859f0488669bbabe2ca09bb62070c14343e4cadc26ea209060200160405180910390a25050565b5f6106c783610ee7565b80549091506001600160a01b031633146106f4576040516331abab6160e01b815260040160405180910390fd5b815f0361071457604051631f2a200560e01b815260040160405180910390fd5b81816003015f828254610727919061161e565b90915550506002810154610746906001600160a01b0316333085610f3e565b827f2dec156b5ea8eee5b7a582c2e87253d7d59df096556b3ec99aa5d6cec4480524838360030154604051610785929190918252602082015260400190565b60405180910390a2505050565b5f61079c86610ae2565b60018101549091506001600160a01b031633146107cc57604051631a40715960e11b815260040160405180910390fd5b6005810154600160401b90046001600160401b03161580159061080357506005810154600160401b90046001600160401b03164210155b15610838576005810154604051638c61445160e01b8152600160401b9091046001600160401b031660048201526024016104d3565b6104f4868287878787610b4c565b5f815f0361086757604051631f2a200560e01b815260040160405180910390fd5b6001600160a01b038416158061088557506001600160a01b03841633145b8061089757506001600160a01b038316155b156108b557604051632484470960e11b815260040160405180910390fd5b604080513360208201526001600160a01b038087169282019290925290841660608201525f9060800160408051601f1981840301815291815281516020928301205f818152600490935291205490915015610937575f8181526004602081905260409182902054915163054a060360e51b81526104d392910190815260200190565b610942338686610329565b5f828152600460208181526040808420859055805161010081018252338082526001600160a01b038c81168386019081528c8216848601818152606086018e8152608087018b815260a088018c815260c089018d815260e08a018e81528f8f5260029c8d90529a909d20985189549088166001600160a01b0319918216178a55955160018a018054918916918816919091179055925199880180549a9096169990941698909817909355955160038501555195830195909555935160059091018054955192511515600160801b0260ff60801b196001600160401b03948516600160401b026fffffffffffffffffffffffffffffffff199098169390941692909217959095179190911617909255919350610a5e913086610f3e565b604080516001600160a01b03868116825260208201869052871691339185917fcce619ab7f759333748cac6bf47e6eff18db4bcdfac256d058d4e7167ac01d41910160405180910390a4509392505050565b5f610adc610abc610fab565b8360405161190160f01b8152600281019290925260228201526042902090565b92915050565b5f81815260026020526040902080546001600160a01b0316610b1a5760405163b08fc1cb60e01b8152600481018390526024016104d3565b6005810154600160801b900460ff1615610b4757604051633d8dfe9960e21b815260040160405180910390fd5b919050565b5f5f610b97610b5c8988886103b9565b85858080601f0160208091040260200160405190810160405280939291908181526020018383808284375f920191909152506110d492505050565b5090925090505f816003811115610bb057610bb0611631565b141580610bca575086546001600160a01b03838116911614155b15610be857604051635cd5d23360e01b815260040160405180910390fd5b60058701546001600160401b0390811690861611610c325760058701546040516318810f8760e01b81526001600160401b03808816600483015290911660248201526044016104d3565b8660040154861015610c645760048088015460405163b5fc5efb60e01b815291820188905260248201526044016104d3565b8660030154861115610c9957600387015460405163355b87f960e11b81526104d3918891600401918252602082015260400190565b5f876004015487610caa9190611645565b6004890188905560058901805467ffffffffffffffff19166001600160401b03891617905590508015610cf85760018801546002890154610cf8916001600160a01b0391821691168361111d565b604080518881526001600160401b038816602082015290810182905289907fafe5fc695367316b037aec8e2c4f26edaf6e6e54cdab5e8425049116da51c4b19060600160405180910390a2505050505050505050565b60058101805460ff60801b1916600160801b179055805460018201546002830154604080516001600160a01b039485166020820152928416908301529190911660608201525f9060800160408051601f1981840301815291815281516020928301205f81815260048452828120819055600390935290822080549193506001929091610de49084906001600160401b03166115ff565b92506101000a8154816001600160401b0302191690836001600160401b031602179055505f82600401548360030154610e1d9190611645565b90508015610e435782546002840154610e43916001600160a01b0391821691168361111d565b6004830154604080519182526020820183905285917fb9e99f1dc9b607db2f7b0d7e14feeef470fe9698b4c491f40e9b3d87212ffb16910160405180910390a250505050565b6060610eb57f00000000000000000000000000000000000000000000000000000000000000005f611153565b905090565b6060610eb57f00000000000000000000000000000000000000000000000000000000000000006001611153565b5f610ef182610ae2565b6005810154909150600160401b90046001600160401b031615610b47576005810154604051638c61445160e01b8152600160401b9091046001600160401b031660048201526024016104d3565b6040516001600160a01b038481166024830152838116604483015260648201839052610fa59186918216906323b872dd906084015b604051602081830303815290604052915060e01b6020820180516001600160e01b0383818316178352505050506111fd565b50505050565b5f306001600160a01b037f00000000000000000000000000000000000000000000000000000000000000001614801561100357507f000000000000000000000000000000000000000000000000000000000000000046145b1561102d57507f000000000000000000000000000000000000000000000000000000000000000090565b610eb5604080517f8b73c3c69bb8fe3d512ecc4cf759cc79239f7b179b0ffacaa9a75d522b39400f60208201527f0000000000000000000000000000000000000000000000000000000000000000918101919091527f000000000000000000000000000000000000000000000000000000000000000060608201524660808201523060a08201525f9060c00160405160208183030381529060405280519060200120905090565b5f5f5f835160410361110b576020840151604085015160608601515f1a6110fd88828585611269565b955095509550505050611116565b505081515f91506002905b9250925092565b6040516001600160a01b0383811660248301526044820183905261114e91859182169063a9059cbb90606401610f73565b505050565b606060ff831461116d5761116683611331565b9050610adc565b81805461117990611658565b80601f01602080910402602001604051908101604052809291908181526020018280546111a590611658565b80156111f05780601f106111c7576101008083540402835291602001916111f0565b820191905f5260205f20905b8154815290600101906020018083116111d357829003601f168201915b5050505050905092915050565b5f5f60205f8451602086015f885af18061121c576040513d5f823e3d81fd5b50505f513d91508115611233578060011415611240565b6001600160a01b0384163b155b15610fa557604051635274afe760e01b81526001600160a01b03851660048201526024016104d3565b5f80807f7fffffffffffffffffffffffffffffff5d576e7357a4501ddfe92f46681b20a08411156112a257505f91506003905082611327565b604080515f808252602082018084528a905260ff891692820192909252606081018790526080810186905260019060a0016020604051602081039080840390855afa1580156112f3573d5f5f3e3d5ffd5b5050604051601f1901519150506001600160a01b03811661131e57505f925060019150829050611327565b92505f91508190505b9450945094915050565b60605f61133d8361136e565b6040805160208082528183019092529192505f91906020820181803683375050509182525060208101929092525090565b5f60ff8216601f811115610adc57604051632cd44ac360e21b815260040160405180910390fd5b80356001600160a01b0381168114610b47575f5ffd5b5f5f5f606084860312156113bd575f5ffd5b6113c684611395565b92506113d460208501611395565b91506113e260408501611395565b90509250925092565b5f602082840312156113fb575f5ffd5b5035919050565b80356001600160401b0381168114610b47575f5ffd5b5f5f5f6060848603121561142a575f5ffd5b83359250602084013591506113e260408501611402565b5f5f5f5f5f60808688031215611455575f5ffd5b853594506020860135935061146c60408701611402565b925060608601356001600160401b03811115611486575f5ffd5b8601601f81018813611496575f5ffd5b80356001600160401b038111156114ab575f5ffd5b8860208284010111156114bc575f5ffd5b959894975092955050506020019190565b5f81518084528060208401602086015e5f602082860101526020601f19601f83011685010191505092915050565b60ff60f81b8816815260e060208201525f61151960e08301896114cd565b828103604084015261152b81896114cd565b606084018890526001600160a01b038716608085015260a0840186905283810360c0850152845180825260208087019350909101905f5b81811015611580578351835260209384019390920191600101611562565b50909b9a5050505050505050505050565b5f5f604083850312156115a2575f5ffd5b50508035926020909101359150565b5f5f5f606084860312156115c3575f5ffd5b6115cc84611395565b92506115da60208501611395565b929592945050506040919091013590565b634e487b7160e01b5f52601160045260245ffd5b6001600160401b038181168382160190811115610adc57610adc6115eb565b80820180821115610adc57610adc6115eb565b634e487b7160e01b5f52602160045260245ffd5b81810381811115610adc57610adc6115eb565b600181811c9082168061166c57607f821691505b60208210810361168a57634e487b7160e01b5f52602260045260245ffd5b5091905056fea26469706673582212202701bb1b3cb48b397ab43876145320098ff95cd81784ad9610ec34ada7f312d664736f6c63430008250033",
}

// PaymentChannelsABI is the input ABI used to generate the binding from.
// Deprecated: Use PaymentChannelsMetaData.ABI instead.
var PaymentChannelsABI = PaymentChannelsMetaData.ABI

// PaymentChannelsBin is the compiled bytecode used for deploying new contracts.
// Deprecated: Use PaymentChannelsMetaData.Bin instead.
var PaymentChannelsBin = PaymentChannelsMetaData.Bin

// DeployPaymentChannels deploys a new Ethereum contract, binding an instance of PaymentChannels to it.
func DeployPaymentChannels(auth *bind.TransactOpts, backend bind.ContractBackend, challengeSeconds uint64) (common.Address, *types.Transaction, *PaymentChannels, error) {
	parsed, err := PaymentChannelsMetaData.GetAbi()
	if err != nil {
		return common.Address{}, nil, nil, err
	}
	if parsed == nil {
		return common.Address{}, nil, nil, errors.New("GetABI returned nil")
	}

	address, tx, contract, err := bind.DeployContract(auth, *parsed, common.FromHex(PaymentChannelsBin), backend, challengeSeconds)
	if err != nil {
		return common.Address{}, nil, nil, err
	}
	return address, tx, &PaymentChannels{PaymentChannelsCaller: PaymentChannelsCaller{contract: contract}, PaymentChannelsTransactor: PaymentChannelsTransactor{contract: contract}, PaymentChannelsFilterer: PaymentChannelsFilterer{contract: contract}}, nil
}

// PaymentChannels is an auto generated Go binding around an Ethereum contract.
type PaymentChannels struct {
	PaymentChannelsCaller     // Read-only binding to the contract
	PaymentChannelsTransactor // Write-only binding to the contract
	PaymentChannelsFilterer   // Log filterer for contract events
}

// PaymentChannelsCaller is an auto generated read-only Go binding around an Ethereum contract.
type PaymentChannelsCaller struct {
	contract *bind.BoundContract // Generic contract wrapper for the low level calls
}

// PaymentChannelsTransactor is an auto generated write-only Go binding around an Ethereum contract.
type PaymentChannelsTransactor struct {
	contract *bind.BoundContract // Generic contract wrapper for the low level calls
}

// PaymentChannelsFilterer is an auto generated log filtering Go binding around an Ethereum contract events.
type PaymentChannelsFilterer struct {
	contract *bind.BoundContract // Generic contract wrapper for the low level calls
}

// PaymentChannelsSession is an auto generated Go binding around an Ethereum contract,
// with pre-set call and transact options.
type PaymentChannelsSession struct {
	Contract     *PaymentChannels  // Generic contract binding to set the session for
	CallOpts     bind.CallOpts     // Call options to use throughout this session
	TransactOpts bind.TransactOpts // Transaction auth options to use throughout this session
}

// PaymentChannelsCallerSession is an auto generated read-only Go binding around an Ethereum contract,
// with pre-set call options.
type PaymentChannelsCallerSession struct {
	Contract *PaymentChannelsCaller // Generic contract caller binding to set the session for
	CallOpts bind.CallOpts          // Call options to use throughout this session
}

// PaymentChannelsTransactorSession is an auto generated write-only Go binding around an Ethereum contract,
// with pre-set transact options.
type PaymentChannelsTransactorSession struct {
	Contract     *PaymentChannelsTransactor // Generic contract transactor binding to set the session for
	TransactOpts bind.TransactOpts          // Transaction auth options to use throughout this session
}

// PaymentChannelsRaw is an auto generated low-level Go binding around an Ethereum contract.
type PaymentChannelsRaw struct {
	Contract *PaymentChannels // Generic contract binding to access the raw methods on
}

// PaymentChannelsCallerRaw is an auto generated low-level read-only Go binding around an Ethereum contract.
type PaymentChannelsCallerRaw struct {
	Contract *PaymentChannelsCaller // Generic read-only contract binding to access the raw methods on
}

// PaymentChannelsTransactorRaw is an auto generated low-level write-only Go binding around an Ethereum contract.
type PaymentChannelsTransactorRaw struct {
	Contract *PaymentChannelsTransactor // Generic write-only contract binding to access the raw methods on
}

// NewPaymentChannels creates a new instance of PaymentChannels, bound to a specific deployed contract.
func NewPaymentChannels(address common.Address, backend bind.ContractBackend) (*PaymentChannels, error) {
	contract, err := bindPaymentChannels(address, backend, backend, backend)
	if err != nil {
		return nil, err
	}
	return &PaymentChannels{PaymentChannelsCaller: PaymentChannelsCaller{contract: contract}, PaymentChannelsTransactor: PaymentChannelsTransactor{contract: contract}, PaymentChannelsFilterer: PaymentChannelsFilterer{contract: contract}}, nil
}

// NewPaymentChannelsCaller creates a new read-only instance of PaymentChannels, bound to a specific deployed contract.
func NewPaymentChannelsCaller(address common.Address, caller bind.ContractCaller) (*PaymentChannelsCaller, error) {
	contract, err := bindPaymentChannels(address, caller, nil, nil)
	if err != nil {
		return nil, err
	}
	return &PaymentChannelsCaller{contract: contract}, nil
}

// NewPaymentChannelsTransactor creates a new write-only instance of PaymentChannels, bound to a specific deployed contract.
func NewPaymentChannelsTransactor(address common.Address, transactor bind.ContractTransactor) (*PaymentChannelsTransactor, error) {
	contract, err := bindPaymentChannels(address, nil, transactor, nil)
	if err != nil {
		return nil, err
	}
	return &PaymentChannelsTransactor{contract: contract}, nil
}

// NewPaymentChannelsFilterer creates a new log filterer instance of PaymentChannels, bound to a specific deployed contract.
func NewPaymentChannelsFilterer(address common.Address, filterer bind.ContractFilterer) (*PaymentChannelsFilterer, error) {
	contract, err := bindPaymentChannels(address, nil, nil, filterer)
	if err != nil {
		return nil, err
	}
	return &PaymentChannelsFilterer{contract: contract}, nil
}

// bindPaymentChannels binds a generic wrapper to an already deployed contract.
func bindPaymentChannels(address common.Address, caller bind.ContractCaller, transactor bind.ContractTransactor, filterer bind.ContractFilterer) (*bind.BoundContract, error) {
	parsed, err := PaymentChannelsMetaData.GetAbi()
	if err != nil {
		return nil, err
	}
	return bind.NewBoundContract(address, *parsed, caller, transactor, filterer), nil
}

// Call invokes the (constant) contract method with params as input values and
// sets the output to result. The result type might be a single field for simple
// returns, a slice of interfaces for anonymous returns and a struct for named
// returns.
func (_PaymentChannels *PaymentChannelsRaw) Call(opts *bind.CallOpts, result *[]interface{}, method string, params ...interface{}) error {
	return _PaymentChannels.Contract.PaymentChannelsCaller.contract.Call(opts, result, method, params...)
}

// Transfer initiates a plain transaction to move funds to the contract, calling
// its default method if one is available.
func (_PaymentChannels *PaymentChannelsRaw) Transfer(opts *bind.TransactOpts) (*types.Transaction, error) {
	return _PaymentChannels.Contract.PaymentChannelsTransactor.contract.Transfer(opts)
}

// Transact invokes the (paid) contract method with params as input values.
func (_PaymentChannels *PaymentChannelsRaw) Transact(opts *bind.TransactOpts, method string, params ...interface{}) (*types.Transaction, error) {
	return _PaymentChannels.Contract.PaymentChannelsTransactor.contract.Transact(opts, method, params...)
}

// Call invokes the (constant) contract method with params as input values and
// sets the output to result. The result type might be a single field for simple
// returns, a slice of interfaces for anonymous returns and a struct for named
// returns.
func (_PaymentChannels *PaymentChannelsCallerRaw) Call(opts *bind.CallOpts, result *[]interface{}, method string, params ...interface{}) error {
	return _PaymentChannels.Contract.contract.Call(opts, result, method, params...)
}

// Transfer initiates a plain transaction to move funds to the contract, calling
// its default method if one is available.
func (_PaymentChannels *PaymentChannelsTransactorRaw) Transfer(opts *bind.TransactOpts) (*types.Transaction, error) {
	return _PaymentChannels.Contract.contract.Transfer(opts)
}

// Transact invokes the (paid) contract method with params as input values.
func (_PaymentChannels *PaymentChannelsTransactorRaw) Transact(opts *bind.TransactOpts, method string, params ...interface{}) (*types.Transaction, error) {
	return _PaymentChannels.Contract.contract.Transact(opts, method, params...)
}

// VOUCHERTYPEHASH is a free data retrieval call binding the contract method 0x94739e87.
//
// Solidity: function VOUCHER_TYPEHASH() view returns(bytes32)
func (_PaymentChannels *PaymentChannelsCaller) VOUCHERTYPEHASH(opts *bind.CallOpts) ([32]byte, error) {
	var out []interface{}
	err := _PaymentChannels.contract.Call(opts, &out, "VOUCHER_TYPEHASH")

	if err != nil {
		return *new([32]byte), err
	}

	out0 := *abi.ConvertType(out[0], new([32]byte)).(*[32]byte)

	return out0, err

}

// VOUCHERTYPEHASH is a free data retrieval call binding the contract method 0x94739e87.
//
// Solidity: function VOUCHER_TYPEHASH() view returns(bytes32)
func (_PaymentChannels *PaymentChannelsSession) VOUCHERTYPEHASH() ([32]byte, error) {
	return _PaymentChannels.Contract.VOUCHERTYPEHASH(&_PaymentChannels.CallOpts)
}

// VOUCHERTYPEHASH is a free data retrieval call binding the contract method 0x94739e87.
//
// Solidity: function VOUCHER_TYPEHASH() view returns(bytes32)
func (_PaymentChannels *PaymentChannelsCallerSession) VOUCHERTYPEHASH() ([32]byte, error) {
	return _PaymentChannels.Contract.VOUCHERTYPEHASH(&_PaymentChannels.CallOpts)
}

// ChallengePeriod is a free data retrieval call binding the contract method 0xf3f480d9.
//
// Solidity: function challengePeriod() view returns(uint64)
func (_PaymentChannels *PaymentChannelsCaller) ChallengePeriod(opts *bind.CallOpts) (uint64, error) {
	var out []interface{}
	err := _PaymentChannels.contract.Call(opts, &out, "challengePeriod")

	if err != nil {
		return *new(uint64), err
	}

	out0 := *abi.ConvertType(out[0], new(uint64)).(*uint64)

	return out0, err

}

// ChallengePeriod is a free data retrieval call binding the contract method 0xf3f480d9.
//
// Solidity: function challengePeriod() view returns(uint64)
func (_PaymentChannels *PaymentChannelsSession) ChallengePeriod() (uint64, error) {
	return _PaymentChannels.Contract.ChallengePeriod(&_PaymentChannels.CallOpts)
}

// ChallengePeriod is a free data retrieval call binding the contract method 0xf3f480d9.
//
// Solidity: function challengePeriod() view returns(uint64)
func (_PaymentChannels *PaymentChannelsCallerSession) ChallengePeriod() (uint64, error) {
	return _PaymentChannels.Contract.ChallengePeriod(&_PaymentChannels.CallOpts)
}

// ChannelId is a free data retrieval call binding the contract method 0x0b1011f7.
//
// Solidity: function channelId(address renter, address provider, address token) view returns(bytes32)
func (_PaymentChannels *PaymentChannelsCaller) ChannelId(opts *bind.CallOpts, renter common.Address, provider common.Address, token common.Address) ([32]byte, error) {
	var out []interface{}
	err := _PaymentChannels.contract.Call(opts, &out, "channelId", renter, provider, token)

	if err != nil {
		return *new([32]byte), err
	}

	out0 := *abi.ConvertType(out[0], new([32]byte)).(*[32]byte)

	return out0, err

}

// ChannelId is a free data retrieval call binding the contract method 0x0b1011f7.
//
// Solidity: function channelId(address renter, address provider, address token) view returns(bytes32)
func (_PaymentChannels *PaymentChannelsSession) ChannelId(renter common.Address, provider common.Address, token common.Address) ([32]byte, error) {
	return _PaymentChannels.Contract.ChannelId(&_PaymentChannels.CallOpts, renter, provider, token)
}

// ChannelId is a free data retrieval call binding the contract method 0x0b1011f7.
//
// Solidity: function channelId(address renter, address provider, address token) view returns(bytes32)
func (_PaymentChannels *PaymentChannelsCallerSession) ChannelId(renter common.Address, provider common.Address, token common.Address) ([32]byte, error) {
	return _PaymentChannels.Contract.ChannelId(&_PaymentChannels.CallOpts, renter, provider, token)
}

// Channels is a free data retrieval call binding the contract method 0x7a7ebd7b.
//
// Solidity: function channels(bytes32 ) view returns(address renter, address provider, address token, uint256 deposit, uint256 paid, uint64 nonce, uint64 closesAt, bool finished)
func (_PaymentChannels *PaymentChannelsCaller) Channels(opts *bind.CallOpts, arg0 [32]byte) (struct {
	Renter   common.Address
	Provider common.Address
	Token    common.Address
	Deposit  *big.Int
	Paid     *big.Int
	Nonce    uint64
	ClosesAt uint64
	Finished bool
}, error) {
	var out []interface{}
	err := _PaymentChannels.contract.Call(opts, &out, "channels", arg0)

	outstruct := new(struct {
		Renter   common.Address
		Provider common.Address
		Token    common.Address
		Deposit  *big.Int
		Paid     *big.Int
		Nonce    uint64
		ClosesAt uint64
		Finished bool
	})
	if err != nil {
		return *outstruct, err
	}

	outstruct.Renter = *abi.ConvertType(out[0], new(common.Address)).(*common.Address)
	outstruct.Provider = *abi.ConvertType(out[1], new(common.Address)).(*common.Address)
	outstruct.Token = *abi.ConvertType(out[2], new(common.Address)).(*common.Address)
	outstruct.Deposit = *abi.ConvertType(out[3], new(*big.Int)).(**big.Int)
	outstruct.Paid = *abi.ConvertType(out[4], new(*big.Int)).(**big.Int)
	outstruct.Nonce = *abi.ConvertType(out[5], new(uint64)).(*uint64)
	outstruct.ClosesAt = *abi.ConvertType(out[6], new(uint64)).(*uint64)
	outstruct.Finished = *abi.ConvertType(out[7], new(bool)).(*bool)

	return *outstruct, err

}

// Channels is a free data retrieval call binding the contract method 0x7a7ebd7b.
//
// Solidity: function channels(bytes32 ) view returns(address renter, address provider, address token, uint256 deposit, uint256 paid, uint64 nonce, uint64 closesAt, bool finished)
func (_PaymentChannels *PaymentChannelsSession) Channels(arg0 [32]byte) (struct {
	Renter   common.Address
	Provider common.Address
	Token    common.Address
	Deposit  *big.Int
	Paid     *big.Int
	Nonce    uint64
	ClosesAt uint64
	Finished bool
}, error) {
	return _PaymentChannels.Contract.Channels(&_PaymentChannels.CallOpts, arg0)
}

// Channels is a free data retrieval call binding the contract method 0x7a7ebd7b.
//
// Solidity: function channels(bytes32 ) view returns(address renter, address provider, address token, uint256 deposit, uint256 paid, uint64 nonce, uint64 closesAt, bool finished)
func (_PaymentChannels *PaymentChannelsCallerSession) Channels(arg0 [32]byte) (struct {
	Renter   common.Address
	Provider common.Address
	Token    common.Address
	Deposit  *big.Int
	Paid     *big.Int
	Nonce    uint64
	ClosesAt uint64
	Finished bool
}, error) {
	return _PaymentChannels.Contract.Channels(&_PaymentChannels.CallOpts, arg0)
}

// Eip712Domain is a free data retrieval call binding the contract method 0x84b0196e.
//
// Solidity: function eip712Domain() view returns(bytes1 fields, string name, string version, uint256 chainId, address verifyingContract, bytes32 salt, uint256[] extensions)
func (_PaymentChannels *PaymentChannelsCaller) Eip712Domain(opts *bind.CallOpts) (struct {
	Fields            [1]byte
	Name              string
	Version           string
	ChainId           *big.Int
	VerifyingContract common.Address
	Salt              [32]byte
	Extensions        []*big.Int
}, error) {
	var out []interface{}
	err := _PaymentChannels.contract.Call(opts, &out, "eip712Domain")

	outstruct := new(struct {
		Fields            [1]byte
		Name              string
		Version           string
		ChainId           *big.Int
		VerifyingContract common.Address
		Salt              [32]byte
		Extensions        []*big.Int
	})
	if err != nil {
		return *outstruct, err
	}

	outstruct.Fields = *abi.ConvertType(out[0], new([1]byte)).(*[1]byte)
	outstruct.Name = *abi.ConvertType(out[1], new(string)).(*string)
	outstruct.Version = *abi.ConvertType(out[2], new(string)).(*string)
	outstruct.ChainId = *abi.ConvertType(out[3], new(*big.Int)).(**big.Int)
	outstruct.VerifyingContract = *abi.ConvertType(out[4], new(common.Address)).(*common.Address)
	outstruct.Salt = *abi.ConvertType(out[5], new([32]byte)).(*[32]byte)
	outstruct.Extensions = *abi.ConvertType(out[6], new([]*big.Int)).(*[]*big.Int)

	return *outstruct, err

}

// Eip712Domain is a free data retrieval call binding the contract method 0x84b0196e.
//
// Solidity: function eip712Domain() view returns(bytes1 fields, string name, string version, uint256 chainId, address verifyingContract, bytes32 salt, uint256[] extensions)
func (_PaymentChannels *PaymentChannelsSession) Eip712Domain() (struct {
	Fields            [1]byte
	Name              string
	Version           string
	ChainId           *big.Int
	VerifyingContract common.Address
	Salt              [32]byte
	Extensions        []*big.Int
}, error) {
	return _PaymentChannels.Contract.Eip712Domain(&_PaymentChannels.CallOpts)
}

// Eip712Domain is a free data retrieval call binding the contract method 0x84b0196e.
//
// Solidity: function eip712Domain() view returns(bytes1 fields, string name, string version, uint256 chainId, address verifyingContract, bytes32 salt, uint256[] extensions)
func (_PaymentChannels *PaymentChannelsCallerSession) Eip712Domain() (struct {
	Fields            [1]byte
	Name              string
	Version           string
	ChainId           *big.Int
	VerifyingContract common.Address
	Salt              [32]byte
	Extensions        []*big.Int
}, error) {
	return _PaymentChannels.Contract.Eip712Domain(&_PaymentChannels.CallOpts)
}

// Generation is a free data retrieval call binding the contract method 0x1158c64c.
//
// Solidity: function generation(bytes32 ) view returns(uint64)
func (_PaymentChannels *PaymentChannelsCaller) Generation(opts *bind.CallOpts, arg0 [32]byte) (uint64, error) {
	var out []interface{}
	err := _PaymentChannels.contract.Call(opts, &out, "generation", arg0)

	if err != nil {
		return *new(uint64), err
	}

	out0 := *abi.ConvertType(out[0], new(uint64)).(*uint64)

	return out0, err

}

// Generation is a free data retrieval call binding the contract method 0x1158c64c.
//
// Solidity: function generation(bytes32 ) view returns(uint64)
func (_PaymentChannels *PaymentChannelsSession) Generation(arg0 [32]byte) (uint64, error) {
	return _PaymentChannels.Contract.Generation(&_PaymentChannels.CallOpts, arg0)
}

// Generation is a free data retrieval call binding the contract method 0x1158c64c.
//
// Solidity: function generation(bytes32 ) view returns(uint64)
func (_PaymentChannels *PaymentChannelsCallerSession) Generation(arg0 [32]byte) (uint64, error) {
	return _PaymentChannels.Contract.Generation(&_PaymentChannels.CallOpts, arg0)
}

// Live is a free data retrieval call binding the contract method 0x8d270500.
//
// Solidity: function live(bytes32 ) view returns(bytes32)
func (_PaymentChannels *PaymentChannelsCaller) Live(opts *bind.CallOpts, arg0 [32]byte) ([32]byte, error) {
	var out []interface{}
	err := _PaymentChannels.contract.Call(opts, &out, "live", arg0)

	if err != nil {
		return *new([32]byte), err
	}

	out0 := *abi.ConvertType(out[0], new([32]byte)).(*[32]byte)

	return out0, err

}

// Live is a free data retrieval call binding the contract method 0x8d270500.
//
// Solidity: function live(bytes32 ) view returns(bytes32)
func (_PaymentChannels *PaymentChannelsSession) Live(arg0 [32]byte) ([32]byte, error) {
	return _PaymentChannels.Contract.Live(&_PaymentChannels.CallOpts, arg0)
}

// Live is a free data retrieval call binding the contract method 0x8d270500.
//
// Solidity: function live(bytes32 ) view returns(bytes32)
func (_PaymentChannels *PaymentChannelsCallerSession) Live(arg0 [32]byte) ([32]byte, error) {
	return _PaymentChannels.Contract.Live(&_PaymentChannels.CallOpts, arg0)
}

// VoucherDigest is a free data retrieval call binding the contract method 0x3046e717.
//
// Solidity: function voucherDigest(bytes32 id, uint256 amount, uint64 nonce) view returns(bytes32)
func (_PaymentChannels *PaymentChannelsCaller) VoucherDigest(opts *bind.CallOpts, id [32]byte, amount *big.Int, nonce uint64) ([32]byte, error) {
	var out []interface{}
	err := _PaymentChannels.contract.Call(opts, &out, "voucherDigest", id, amount, nonce)

	if err != nil {
		return *new([32]byte), err
	}

	out0 := *abi.ConvertType(out[0], new([32]byte)).(*[32]byte)

	return out0, err

}

// VoucherDigest is a free data retrieval call binding the contract method 0x3046e717.
//
// Solidity: function voucherDigest(bytes32 id, uint256 amount, uint64 nonce) view returns(bytes32)
func (_PaymentChannels *PaymentChannelsSession) VoucherDigest(id [32]byte, amount *big.Int, nonce uint64) ([32]byte, error) {
	return _PaymentChannels.Contract.VoucherDigest(&_PaymentChannels.CallOpts, id, amount, nonce)
}

// VoucherDigest is a free data retrieval call binding the contract method 0x3046e717.
//
// Solidity: function voucherDigest(bytes32 id, uint256 amount, uint64 nonce) view returns(bytes32)
func (_PaymentChannels *PaymentChannelsCallerSession) VoucherDigest(id [32]byte, amount *big.Int, nonce uint64) ([32]byte, error) {
	return _PaymentChannels.Contract.VoucherDigest(&_PaymentChannels.CallOpts, id, amount, nonce)
}

// Close is a paid mutator transaction binding the contract method 0x612e5f4f.
//
// Solidity: function close(bytes32 id, uint256 amount, uint64 nonce, bytes signature) returns()
func (_PaymentChannels *PaymentChannelsTransactor) Close(opts *bind.TransactOpts, id [32]byte, amount *big.Int, nonce uint64, signature []byte) (*types.Transaction, error) {
	return _PaymentChannels.contract.Transact(opts, "close", id, amount, nonce, signature)
}

// Close is a paid mutator transaction binding the contract method 0x612e5f4f.
//
// Solidity: function close(bytes32 id, uint256 amount, uint64 nonce, bytes signature) returns()
func (_PaymentChannels *PaymentChannelsSession) Close(id [32]byte, amount *big.Int, nonce uint64, signature []byte) (*types.Transaction, error) {
	return _PaymentChannels.Contract.Close(&_PaymentChannels.TransactOpts, id, amount, nonce, signature)
}

// Close is a paid mutator transaction binding the contract method 0x612e5f4f.
//
// Solidity: function close(bytes32 id, uint256 amount, uint64 nonce, bytes signature) returns()
func (_PaymentChannels *PaymentChannelsTransactorSession) Close(id [32]byte, amount *big.Int, nonce uint64, signature []byte) (*types.Transaction, error) {
	return _PaymentChannels.Contract.Close(&_PaymentChannels.TransactOpts, id, amount, nonce, signature)
}

// Open is a paid mutator transaction binding the contract method 0xf4f27042.
//
// Solidity: function open(address provider, address token, uint256 amount) returns(bytes32 id)
func (_PaymentChannels *PaymentChannelsTransactor) Open(opts *bind.TransactOpts, provider common.Address, token common.Address, amount *big.Int) (*types.Transaction, error) {
	return _PaymentChannels.contract.Transact(opts, "open", provider, token, amount)
}

// Open is a paid mutator transaction binding the contract method 0xf4f27042.
//
// Solidity: function open(address provider, address token, uint256 amount) returns(bytes32 id)
func (_PaymentChannels *PaymentChannelsSession) Open(provider common.Address, token common.Address, amount *big.Int) (*types.Transaction, error) {
	return _PaymentChannels.Contract.Open(&_PaymentChannels.TransactOpts, provider, token, amount)
}

// Open is a paid mutator transaction binding the contract method 0xf4f27042.
//
// Solidity: function open(address provider, address token, uint256 amount) returns(bytes32 id)
func (_PaymentChannels *PaymentChannelsTransactorSession) Open(provider common.Address, token common.Address, amount *big.Int) (*types.Transaction, error) {
	return _PaymentChannels.Contract.Open(&_PaymentChannels.TransactOpts, provider, token, amount)
}

// Redeem is a paid mutator transaction binding the contract method 0xc8d53726.
//
// Solidity: function redeem(bytes32 id, uint256 amount, uint64 nonce, bytes signature) returns()
func (_PaymentChannels *PaymentChannelsTransactor) Redeem(opts *bind.TransactOpts, id [32]byte, amount *big.Int, nonce uint64, signature []byte) (*types.Transaction, error) {
	return _PaymentChannels.contract.Transact(opts, "redeem", id, amount, nonce, signature)
}

// Redeem is a paid mutator transaction binding the contract method 0xc8d53726.
//
// Solidity: function redeem(bytes32 id, uint256 amount, uint64 nonce, bytes signature) returns()
func (_PaymentChannels *PaymentChannelsSession) Redeem(id [32]byte, amount *big.Int, nonce uint64, signature []byte) (*types.Transaction, error) {
	return _PaymentChannels.Contract.Redeem(&_PaymentChannels.TransactOpts, id, amount, nonce, signature)
}

// Redeem is a paid mutator transaction binding the contract method 0xc8d53726.
//
// Solidity: function redeem(bytes32 id, uint256 amount, uint64 nonce, bytes signature) returns()
func (_PaymentChannels *PaymentChannelsTransactorSession) Redeem(id [32]byte, amount *big.Int, nonce uint64, signature []byte) (*types.Transaction, error) {
	return _PaymentChannels.Contract.Redeem(&_PaymentChannels.TransactOpts, id, amount, nonce, signature)
}

// StartClose is a paid mutator transaction binding the contract method 0x93b1d669.
//
// Solidity: function startClose(bytes32 id) returns()
func (_PaymentChannels *PaymentChannelsTransactor) StartClose(opts *bind.TransactOpts, id [32]byte) (*types.Transaction, error) {
	return _PaymentChannels.contract.Transact(opts, "startClose", id)
}

// StartClose is a paid mutator transaction binding the contract method 0x93b1d669.
//
// Solidity: function startClose(bytes32 id) returns()
func (_PaymentChannels *PaymentChannelsSession) StartClose(id [32]byte) (*types.Transaction, error) {
	return _PaymentChannels.Contract.StartClose(&_PaymentChannels.TransactOpts, id)
}

// StartClose is a paid mutator transaction binding the contract method 0x93b1d669.
//
// Solidity: function startClose(bytes32 id) returns()
func (_PaymentChannels *PaymentChannelsTransactorSession) StartClose(id [32]byte) (*types.Transaction, error) {
	return _PaymentChannels.Contract.StartClose(&_PaymentChannels.TransactOpts, id)
}

// TopUp is a paid mutator transaction binding the contract method 0xb67644b9.
//
// Solidity: function topUp(bytes32 id, uint256 amount) returns()
func (_PaymentChannels *PaymentChannelsTransactor) TopUp(opts *bind.TransactOpts, id [32]byte, amount *big.Int) (*types.Transaction, error) {
	return _PaymentChannels.contract.Transact(opts, "topUp", id, amount)
}

// TopUp is a paid mutator transaction binding the contract method 0xb67644b9.
//
// Solidity: function topUp(bytes32 id, uint256 amount) returns()
func (_PaymentChannels *PaymentChannelsSession) TopUp(id [32]byte, amount *big.Int) (*types.Transaction, error) {
	return _PaymentChannels.Contract.TopUp(&_PaymentChannels.TransactOpts, id, amount)
}

// TopUp is a paid mutator transaction binding the contract method 0xb67644b9.
//
// Solidity: function topUp(bytes32 id, uint256 amount) returns()
func (_PaymentChannels *PaymentChannelsTransactorSession) TopUp(id [32]byte, amount *big.Int) (*types.Transaction, error) {
	return _PaymentChannels.Contract.TopUp(&_PaymentChannels.TransactOpts, id, amount)
}

// Withdraw is a paid mutator transaction binding the contract method 0x8e19899e.
//
// Solidity: function withdraw(bytes32 id) returns()
func (_PaymentChannels *PaymentChannelsTransactor) Withdraw(opts *bind.TransactOpts, id [32]byte) (*types.Transaction, error) {
	return _PaymentChannels.contract.Transact(opts, "withdraw", id)
}

// Withdraw is a paid mutator transaction binding the contract method 0x8e19899e.
//
// Solidity: function withdraw(bytes32 id) returns()
func (_PaymentChannels *PaymentChannelsSession) Withdraw(id [32]byte) (*types.Transaction, error) {
	return _PaymentChannels.Contract.Withdraw(&_PaymentChannels.TransactOpts, id)
}

// Withdraw is a paid mutator transaction binding the contract method 0x8e19899e.
//
// Solidity: function withdraw(bytes32 id) returns()
func (_PaymentChannels *PaymentChannelsTransactorSession) Withdraw(id [32]byte) (*types.Transaction, error) {
	return _PaymentChannels.Contract.Withdraw(&_PaymentChannels.TransactOpts, id)
}

// PaymentChannelsCloseStartedIterator is returned from FilterCloseStarted and is used to iterate over the raw logs and unpacked data for CloseStarted events raised by the PaymentChannels contract.
type PaymentChannelsCloseStartedIterator struct {
	Event *PaymentChannelsCloseStarted // Event containing the contract specifics and raw log

	contract *bind.BoundContract // Generic contract to use for unpacking event data
	event    string              // Event name to use for unpacking event data

	logs chan types.Log        // Log channel receiving the found contract events
	sub  ethereum.Subscription // Subscription for errors, completion and termination
	done bool                  // Whether the subscription completed delivering logs
	fail error                 // Occurred error to stop iteration
}

// Next advances the iterator to the subsequent event, returning whether there
// are any more events found. In case of a retrieval or parsing error, false is
// returned and Error() can be queried for the exact failure.
func (it *PaymentChannelsCloseStartedIterator) Next() bool {
	// If the iterator failed, stop iterating
	if it.fail != nil {
		return false
	}
	// If the iterator completed, deliver directly whatever's available
	if it.done {
		select {
		case log := <-it.logs:
			it.Event = new(PaymentChannelsCloseStarted)
			if err := it.contract.UnpackLog(it.Event, it.event, log); err != nil {
				it.fail = err
				return false
			}
			it.Event.Raw = log
			return true

		default:
			return false
		}
	}
	// Iterator still in progress, wait for either a data or an error event
	select {
	case log := <-it.logs:
		it.Event = new(PaymentChannelsCloseStarted)
		if err := it.contract.UnpackLog(it.Event, it.event, log); err != nil {
			it.fail = err
			return false
		}
		it.Event.Raw = log
		return true

	case err := <-it.sub.Err():
		it.done = true
		it.fail = err
		return it.Next()
	}
}

// Error returns any retrieval or parsing error occurred during filtering.
func (it *PaymentChannelsCloseStartedIterator) Error() error {
	return it.fail
}

// Close terminates the iteration process, releasing any pending underlying
// resources.
func (it *PaymentChannelsCloseStartedIterator) Close() error {
	it.sub.Unsubscribe()
	return nil
}

// PaymentChannelsCloseStarted represents a CloseStarted event raised by the PaymentChannels contract.
type PaymentChannelsCloseStarted struct {
	Id       [32]byte
	ClosesAt uint64
	Raw      types.Log // Blockchain specific contextual infos
}

// FilterCloseStarted is a free log retrieval operation binding the contract event 0x513c2f7e597098def3859f0488669bbabe2ca09bb62070c14343e4cadc26ea20.
//
// Solidity: event CloseStarted(bytes32 indexed id, uint64 closesAt)
func (_PaymentChannels *PaymentChannelsFilterer) FilterCloseStarted(opts *bind.FilterOpts, id [][32]byte) (*PaymentChannelsCloseStartedIterator, error) {

	var idRule []interface{}
	for _, idItem := range id {
		idRule = append(idRule, idItem)
	}

	logs, sub, err := _PaymentChannels.contract.FilterLogs(opts, "CloseStarted", idRule)
	if err != nil {
		return nil, err
	}
	return &PaymentChannelsCloseStartedIterator{contract: _PaymentChannels.contract, event: "CloseStarted", logs: logs, sub: sub}, nil
}

// WatchCloseStarted is a free log subscription operation binding the contract event 0x513c2f7e597098def3859f0488669bbabe2ca09bb62070c14343e4cadc26ea20.
//
// Solidity: event CloseStarted(bytes32 indexed id, uint64 closesAt)
func (_PaymentChannels *PaymentChannelsFilterer) WatchCloseStarted(opts *bind.WatchOpts, sink chan<- *PaymentChannelsCloseStarted, id [][32]byte) (event.Subscription, error) {

	var idRule []interface{}
	for _, idItem := range id {
		idRule = append(idRule, idItem)
	}

	logs, sub, err := _PaymentChannels.contract.WatchLogs(opts, "CloseStarted", idRule)
	if err != nil {
		return nil, err
	}
	return event.NewSubscription(func(quit <-chan struct{}) error {
		defer sub.Unsubscribe()
		for {
			select {
			case log := <-logs:
				// New log arrived, parse the event and forward to the user
				event := new(PaymentChannelsCloseStarted)
				if err := _PaymentChannels.contract.UnpackLog(event, "CloseStarted", log); err != nil {
					// If the signature doesn't match, skip this log.
					if errors.Is(err, bind.ErrEventSignatureMismatch) {
						continue
					}
					return err
				}
				event.Raw = log

				select {
				case sink <- event:
				case err := <-sub.Err():
					return err
				case <-quit:
					return nil
				}
			case err := <-sub.Err():
				return err
			case <-quit:
				return nil
			}
		}
	}), nil
}

// ParseCloseStarted is a log parse operation binding the contract event 0x513c2f7e597098def3859f0488669bbabe2ca09bb62070c14343e4cadc26ea20.
//
// Solidity: event CloseStarted(bytes32 indexed id, uint64 closesAt)
func (_PaymentChannels *PaymentChannelsFilterer) ParseCloseStarted(log types.Log) (*PaymentChannelsCloseStarted, error) {
	event := new(PaymentChannelsCloseStarted)
	if err := _PaymentChannels.contract.UnpackLog(event, "CloseStarted", log); err != nil {
		return nil, err
	}
	event.Raw = log
	return event, nil
}

// PaymentChannelsEIP712DomainChangedIterator is returned from FilterEIP712DomainChanged and is used to iterate over the raw logs and unpacked data for EIP712DomainChanged events raised by the PaymentChannels contract.
type PaymentChannelsEIP712DomainChangedIterator struct {
	Event *PaymentChannelsEIP712DomainChanged // Event containing the contract specifics and raw log

	contract *bind.BoundContract // Generic contract to use for unpacking event data
	event    string              // Event name to use for unpacking event data

	logs chan types.Log        // Log channel receiving the found contract events
	sub  ethereum.Subscription // Subscription for errors, completion and termination
	done bool                  // Whether the subscription completed delivering logs
	fail error                 // Occurred error to stop iteration
}

// Next advances the iterator to the subsequent event, returning whether there
// are any more events found. In case of a retrieval or parsing error, false is
// returned and Error() can be queried for the exact failure.
func (it *PaymentChannelsEIP712DomainChangedIterator) Next() bool {
	// If the iterator failed, stop iterating
	if it.fail != nil {
		return false
	}
	// If the iterator completed, deliver directly whatever's available
	if it.done {
		select {
		case log := <-it.logs:
			it.Event = new(PaymentChannelsEIP712DomainChanged)
			if err := it.contract.UnpackLog(it.Event, it.event, log); err != nil {
				it.fail = err
				return false
			}
			it.Event.Raw = log
			return true

		default:
			return false
		}
	}
	// Iterator still in progress, wait for either a data or an error event
	select {
	case log := <-it.logs:
		it.Event = new(PaymentChannelsEIP712DomainChanged)
		if err := it.contract.UnpackLog(it.Event, it.event, log); err != nil {
			it.fail = err
			return false
		}
		it.Event.Raw = log
		return true

	case err := <-it.sub.Err():
		it.done = true
		it.fail = err
		return it.Next()
	}
}

// Error returns any retrieval or parsing error occurred during filtering.
func (it *PaymentChannelsEIP712DomainChangedIterator) Error() error {
	return it.fail
}

// Close terminates the iteration process, releasing any pending underlying
// resources.
func (it *PaymentChannelsEIP712DomainChangedIterator) Close() error {
	it.sub.Unsubscribe()
	return nil
}

// PaymentChannelsEIP712DomainChanged represents a EIP712DomainChanged event raised by the PaymentChannels contract.
type PaymentChannelsEIP712DomainChanged struct {
	Raw types.Log // Blockchain specific contextual infos
}

// FilterEIP712DomainChanged is a free log retrieval operation binding the contract event 0x0a6387c9ea3628b88a633bb4f3b151770f70085117a15f9bf3787cda53f13d31.
//
// Solidity: event EIP712DomainChanged()
func (_PaymentChannels *PaymentChannelsFilterer) FilterEIP712DomainChanged(opts *bind.FilterOpts) (*PaymentChannelsEIP712DomainChangedIterator, error) {

	logs, sub, err := _PaymentChannels.contract.FilterLogs(opts, "EIP712DomainChanged")
	if err != nil {
		return nil, err
	}
	return &PaymentChannelsEIP712DomainChangedIterator{contract: _PaymentChannels.contract, event: "EIP712DomainChanged", logs: logs, sub: sub}, nil
}

// WatchEIP712DomainChanged is a free log subscription operation binding the contract event 0x0a6387c9ea3628b88a633bb4f3b151770f70085117a15f9bf3787cda53f13d31.
//
// Solidity: event EIP712DomainChanged()
func (_PaymentChannels *PaymentChannelsFilterer) WatchEIP712DomainChanged(opts *bind.WatchOpts, sink chan<- *PaymentChannelsEIP712DomainChanged) (event.Subscription, error) {

	logs, sub, err := _PaymentChannels.contract.WatchLogs(opts, "EIP712DomainChanged")
	if err != nil {
		return nil, err
	}
	return event.NewSubscription(func(quit <-chan struct{}) error {
		defer sub.Unsubscribe()
		for {
			select {
			case log := <-logs:
				// New log arrived, parse the event and forward to the user
				event := new(PaymentChannelsEIP712DomainChanged)
				if err := _PaymentChannels.contract.UnpackLog(event, "EIP712DomainChanged", log); err != nil {
					// If the signature doesn't match, skip this log.
					if errors.Is(err, bind.ErrEventSignatureMismatch) {
						continue
					}
					return err
				}
				event.Raw = log

				select {
				case sink <- event:
				case err := <-sub.Err():
					return err
				case <-quit:
					return nil
				}
			case err := <-sub.Err():
				return err
			case <-quit:
				return nil
			}
		}
	}), nil
}

// ParseEIP712DomainChanged is a log parse operation binding the contract event 0x0a6387c9ea3628b88a633bb4f3b151770f70085117a15f9bf3787cda53f13d31.
//
// Solidity: event EIP712DomainChanged()
func (_PaymentChannels *PaymentChannelsFilterer) ParseEIP712DomainChanged(log types.Log) (*PaymentChannelsEIP712DomainChanged, error) {
	event := new(PaymentChannelsEIP712DomainChanged)
	if err := _PaymentChannels.contract.UnpackLog(event, "EIP712DomainChanged", log); err != nil {
		return nil, err
	}
	event.Raw = log
	return event, nil
}

// PaymentChannelsFinishedIterator is returned from FilterFinished and is used to iterate over the raw logs and unpacked data for Finished events raised by the PaymentChannels contract.
type PaymentChannelsFinishedIterator struct {
	Event *PaymentChannelsFinished // Event containing the contract specifics and raw log

	contract *bind.BoundContract // Generic contract to use for unpacking event data
	event    string              // Event name to use for unpacking event data

	logs chan types.Log        // Log channel receiving the found contract events
	sub  ethereum.Subscription // Subscription for errors, completion and termination
	done bool                  // Whether the subscription completed delivering logs
	fail error                 // Occurred error to stop iteration
}

// Next advances the iterator to the subsequent event, returning whether there
// are any more events found. In case of a retrieval or parsing error, false is
// returned and Error() can be queried for the exact failure.
func (it *PaymentChannelsFinishedIterator) Next() bool {
	// If the iterator failed, stop iterating
	if it.fail != nil {
		return false
	}
	// If the iterator completed, deliver directly whatever's available
	if it.done {
		select {
		case log := <-it.logs:
			it.Event = new(PaymentChannelsFinished)
			if err := it.contract.UnpackLog(it.Event, it.event, log); err != nil {
				it.fail = err
				return false
			}
			it.Event.Raw = log
			return true

		default:
			return false
		}
	}
	// Iterator still in progress, wait for either a data or an error event
	select {
	case log := <-it.logs:
		it.Event = new(PaymentChannelsFinished)
		if err := it.contract.UnpackLog(it.Event, it.event, log); err != nil {
			it.fail = err
			return false
		}
		it.Event.Raw = log
		return true

	case err := <-it.sub.Err():
		it.done = true
		it.fail = err
		return it.Next()
	}
}

// Error returns any retrieval or parsing error occurred during filtering.
func (it *PaymentChannelsFinishedIterator) Error() error {
	return it.fail
}

// Close terminates the iteration process, releasing any pending underlying
// resources.
func (it *PaymentChannelsFinishedIterator) Close() error {
	it.sub.Unsubscribe()
	return nil
}

// PaymentChannelsFinished represents a Finished event raised by the PaymentChannels contract.
type PaymentChannelsFinished struct {
	Id       [32]byte
	Paid     *big.Int
	Refunded *big.Int
	Raw      types.Log // Blockchain specific contextual infos
}

// FilterFinished is a free log retrieval operation binding the contract event 0xb9e99f1dc9b607db2f7b0d7e14feeef470fe9698b4c491f40e9b3d87212ffb16.
//
// Solidity: event Finished(bytes32 indexed id, uint256 paid, uint256 refunded)
func (_PaymentChannels *PaymentChannelsFilterer) FilterFinished(opts *bind.FilterOpts, id [][32]byte) (*PaymentChannelsFinishedIterator, error) {

	var idRule []interface{}
	for _, idItem := range id {
		idRule = append(idRule, idItem)
	}

	logs, sub, err := _PaymentChannels.contract.FilterLogs(opts, "Finished", idRule)
	if err != nil {
		return nil, err
	}
	return &PaymentChannelsFinishedIterator{contract: _PaymentChannels.contract, event: "Finished", logs: logs, sub: sub}, nil
}

// WatchFinished is a free log subscription operation binding the contract event 0xb9e99f1dc9b607db2f7b0d7e14feeef470fe9698b4c491f40e9b3d87212ffb16.
//
// Solidity: event Finished(bytes32 indexed id, uint256 paid, uint256 refunded)
func (_PaymentChannels *PaymentChannelsFilterer) WatchFinished(opts *bind.WatchOpts, sink chan<- *PaymentChannelsFinished, id [][32]byte) (event.Subscription, error) {

	var idRule []interface{}
	for _, idItem := range id {
		idRule = append(idRule, idItem)
	}

	logs, sub, err := _PaymentChannels.contract.WatchLogs(opts, "Finished", idRule)
	if err != nil {
		return nil, err
	}
	return event.NewSubscription(func(quit <-chan struct{}) error {
		defer sub.Unsubscribe()
		for {
			select {
			case log := <-logs:
				// New log arrived, parse the event and forward to the user
				event := new(PaymentChannelsFinished)
				if err := _PaymentChannels.contract.UnpackLog(event, "Finished", log); err != nil {
					// If the signature doesn't match, skip this log.
					if errors.Is(err, bind.ErrEventSignatureMismatch) {
						continue
					}
					return err
				}
				event.Raw = log

				select {
				case sink <- event:
				case err := <-sub.Err():
					return err
				case <-quit:
					return nil
				}
			case err := <-sub.Err():
				return err
			case <-quit:
				return nil
			}
		}
	}), nil
}

// ParseFinished is a log parse operation binding the contract event 0xb9e99f1dc9b607db2f7b0d7e14feeef470fe9698b4c491f40e9b3d87212ffb16.
//
// Solidity: event Finished(bytes32 indexed id, uint256 paid, uint256 refunded)
func (_PaymentChannels *PaymentChannelsFilterer) ParseFinished(log types.Log) (*PaymentChannelsFinished, error) {
	event := new(PaymentChannelsFinished)
	if err := _PaymentChannels.contract.UnpackLog(event, "Finished", log); err != nil {
		return nil, err
	}
	event.Raw = log
	return event, nil
}

// PaymentChannelsOpenedIterator is returned from FilterOpened and is used to iterate over the raw logs and unpacked data for Opened events raised by the PaymentChannels contract.
type PaymentChannelsOpenedIterator struct {
	Event *PaymentChannelsOpened // Event containing the contract specifics and raw log

	contract *bind.BoundContract // Generic contract to use for unpacking event data
	event    string              // Event name to use for unpacking event data

	logs chan types.Log        // Log channel receiving the found contract events
	sub  ethereum.Subscription // Subscription for errors, completion and termination
	done bool                  // Whether the subscription completed delivering logs
	fail error                 // Occurred error to stop iteration
}

// Next advances the iterator to the subsequent event, returning whether there
// are any more events found. In case of a retrieval or parsing error, false is
// returned and Error() can be queried for the exact failure.
func (it *PaymentChannelsOpenedIterator) Next() bool {
	// If the iterator failed, stop iterating
	if it.fail != nil {
		return false
	}
	// If the iterator completed, deliver directly whatever's available
	if it.done {
		select {
		case log := <-it.logs:
			it.Event = new(PaymentChannelsOpened)
			if err := it.contract.UnpackLog(it.Event, it.event, log); err != nil {
				it.fail = err
				return false
			}
			it.Event.Raw = log
			return true

		default:
			return false
		}
	}
	// Iterator still in progress, wait for either a data or an error event
	select {
	case log := <-it.logs:
		it.Event = new(PaymentChannelsOpened)
		if err := it.contract.UnpackLog(it.Event, it.event, log); err != nil {
			it.fail = err
			return false
		}
		it.Event.Raw = log
		return true

	case err := <-it.sub.Err():
		it.done = true
		it.fail = err
		return it.Next()
	}
}

// Error returns any retrieval or parsing error occurred during filtering.
func (it *PaymentChannelsOpenedIterator) Error() error {
	return it.fail
}

// Close terminates the iteration process, releasing any pending underlying
// resources.
func (it *PaymentChannelsOpenedIterator) Close() error {
	it.sub.Unsubscribe()
	return nil
}

// PaymentChannelsOpened represents a Opened event raised by the PaymentChannels contract.
type PaymentChannelsOpened struct {
	Id       [32]byte
	Renter   common.Address
	Provider common.Address
	Token    common.Address
	Deposit  *big.Int
	Raw      types.Log // Blockchain specific contextual infos
}

// FilterOpened is a free log retrieval operation binding the contract event 0xcce619ab7f759333748cac6bf47e6eff18db4bcdfac256d058d4e7167ac01d41.
//
// Solidity: event Opened(bytes32 indexed id, address indexed renter, address indexed provider, address token, uint256 deposit)
func (_PaymentChannels *PaymentChannelsFilterer) FilterOpened(opts *bind.FilterOpts, id [][32]byte, renter []common.Address, provider []common.Address) (*PaymentChannelsOpenedIterator, error) {

	var idRule []interface{}
	for _, idItem := range id {
		idRule = append(idRule, idItem)
	}
	var renterRule []interface{}
	for _, renterItem := range renter {
		renterRule = append(renterRule, renterItem)
	}
	var providerRule []interface{}
	for _, providerItem := range provider {
		providerRule = append(providerRule, providerItem)
	}

	logs, sub, err := _PaymentChannels.contract.FilterLogs(opts, "Opened", idRule, renterRule, providerRule)
	if err != nil {
		return nil, err
	}
	return &PaymentChannelsOpenedIterator{contract: _PaymentChannels.contract, event: "Opened", logs: logs, sub: sub}, nil
}

// WatchOpened is a free log subscription operation binding the contract event 0xcce619ab7f759333748cac6bf47e6eff18db4bcdfac256d058d4e7167ac01d41.
//
// Solidity: event Opened(bytes32 indexed id, address indexed renter, address indexed provider, address token, uint256 deposit)
func (_PaymentChannels *PaymentChannelsFilterer) WatchOpened(opts *bind.WatchOpts, sink chan<- *PaymentChannelsOpened, id [][32]byte, renter []common.Address, provider []common.Address) (event.Subscription, error) {

	var idRule []interface{}
	for _, idItem := range id {
		idRule = append(idRule, idItem)
	}
	var renterRule []interface{}
	for _, renterItem := range renter {
		renterRule = append(renterRule, renterItem)
	}
	var providerRule []interface{}
	for _, providerItem := range provider {
		providerRule = append(providerRule, providerItem)
	}

	logs, sub, err := _PaymentChannels.contract.WatchLogs(opts, "Opened", idRule, renterRule, providerRule)
	if err != nil {
		return nil, err
	}
	return event.NewSubscription(func(quit <-chan struct{}) error {
		defer sub.Unsubscribe()
		for {
			select {
			case log := <-logs:
				// New log arrived, parse the event and forward to the user
				event := new(PaymentChannelsOpened)
				if err := _PaymentChannels.contract.UnpackLog(event, "Opened", log); err != nil {
					// If the signature doesn't match, skip this log.
					if errors.Is(err, bind.ErrEventSignatureMismatch) {
						continue
					}
					return err
				}
				event.Raw = log

				select {
				case sink <- event:
				case err := <-sub.Err():
					return err
				case <-quit:
					return nil
				}
			case err := <-sub.Err():
				return err
			case <-quit:
				return nil
			}
		}
	}), nil
}

// ParseOpened is a log parse operation binding the contract event 0xcce619ab7f759333748cac6bf47e6eff18db4bcdfac256d058d4e7167ac01d41.
//
// Solidity: event Opened(bytes32 indexed id, address indexed renter, address indexed provider, address token, uint256 deposit)
func (_PaymentChannels *PaymentChannelsFilterer) ParseOpened(log types.Log) (*PaymentChannelsOpened, error) {
	event := new(PaymentChannelsOpened)
	if err := _PaymentChannels.contract.UnpackLog(event, "Opened", log); err != nil {
		return nil, err
	}
	event.Raw = log
	return event, nil
}

// PaymentChannelsRedeemedIterator is returned from FilterRedeemed and is used to iterate over the raw logs and unpacked data for Redeemed events raised by the PaymentChannels contract.
type PaymentChannelsRedeemedIterator struct {
	Event *PaymentChannelsRedeemed // Event containing the contract specifics and raw log

	contract *bind.BoundContract // Generic contract to use for unpacking event data
	event    string              // Event name to use for unpacking event data

	logs chan types.Log        // Log channel receiving the found contract events
	sub  ethereum.Subscription // Subscription for errors, completion and termination
	done bool                  // Whether the subscription completed delivering logs
	fail error                 // Occurred error to stop iteration
}

// Next advances the iterator to the subsequent event, returning whether there
// are any more events found. In case of a retrieval or parsing error, false is
// returned and Error() can be queried for the exact failure.
func (it *PaymentChannelsRedeemedIterator) Next() bool {
	// If the iterator failed, stop iterating
	if it.fail != nil {
		return false
	}
	// If the iterator completed, deliver directly whatever's available
	if it.done {
		select {
		case log := <-it.logs:
			it.Event = new(PaymentChannelsRedeemed)
			if err := it.contract.UnpackLog(it.Event, it.event, log); err != nil {
				it.fail = err
				return false
			}
			it.Event.Raw = log
			return true

		default:
			return false
		}
	}
	// Iterator still in progress, wait for either a data or an error event
	select {
	case log := <-it.logs:
		it.Event = new(PaymentChannelsRedeemed)
		if err := it.contract.UnpackLog(it.Event, it.event, log); err != nil {
			it.fail = err
			return false
		}
		it.Event.Raw = log
		return true

	case err := <-it.sub.Err():
		it.done = true
		it.fail = err
		return it.Next()
	}
}

// Error returns any retrieval or parsing error occurred during filtering.
func (it *PaymentChannelsRedeemedIterator) Error() error {
	return it.fail
}

// Close terminates the iteration process, releasing any pending underlying
// resources.
func (it *PaymentChannelsRedeemedIterator) Close() error {
	it.sub.Unsubscribe()
	return nil
}

// PaymentChannelsRedeemed represents a Redeemed event raised by the PaymentChannels contract.
type PaymentChannelsRedeemed struct {
	Id      [32]byte
	Amount  *big.Int
	Nonce   uint64
	PaidNow *big.Int
	Raw     types.Log // Blockchain specific contextual infos
}

// FilterRedeemed is a free log retrieval operation binding the contract event 0xafe5fc695367316b037aec8e2c4f26edaf6e6e54cdab5e8425049116da51c4b1.
//
// Solidity: event Redeemed(bytes32 indexed id, uint256 amount, uint64 nonce, uint256 paidNow)
func (_PaymentChannels *PaymentChannelsFilterer) FilterRedeemed(opts *bind.FilterOpts, id [][32]byte) (*PaymentChannelsRedeemedIterator, error) {

	var idRule []interface{}
	for _, idItem := range id {
		idRule = append(idRule, idItem)
	}

	logs, sub, err := _PaymentChannels.contract.FilterLogs(opts, "Redeemed", idRule)
	if err != nil {
		return nil, err
	}
	return &PaymentChannelsRedeemedIterator{contract: _PaymentChannels.contract, event: "Redeemed", logs: logs, sub: sub}, nil
}

// WatchRedeemed is a free log subscription operation binding the contract event 0xafe5fc695367316b037aec8e2c4f26edaf6e6e54cdab5e8425049116da51c4b1.
//
// Solidity: event Redeemed(bytes32 indexed id, uint256 amount, uint64 nonce, uint256 paidNow)
func (_PaymentChannels *PaymentChannelsFilterer) WatchRedeemed(opts *bind.WatchOpts, sink chan<- *PaymentChannelsRedeemed, id [][32]byte) (event.Subscription, error) {

	var idRule []interface{}
	for _, idItem := range id {
		idRule = append(idRule, idItem)
	}

	logs, sub, err := _PaymentChannels.contract.WatchLogs(opts, "Redeemed", idRule)
	if err != nil {
		return nil, err
	}
	return event.NewSubscription(func(quit <-chan struct{}) error {
		defer sub.Unsubscribe()
		for {
			select {
			case log := <-logs:
				// New log arrived, parse the event and forward to the user
				event := new(PaymentChannelsRedeemed)
				if err := _PaymentChannels.contract.UnpackLog(event, "Redeemed", log); err != nil {
					// If the signature doesn't match, skip this log.
					if errors.Is(err, bind.ErrEventSignatureMismatch) {
						continue
					}
					return err
				}
				event.Raw = log

				select {
				case sink <- event:
				case err := <-sub.Err():
					return err
				case <-quit:
					return nil
				}
			case err := <-sub.Err():
				return err
			case <-quit:
				return nil
			}
		}
	}), nil
}

// ParseRedeemed is a log parse operation binding the contract event 0xafe5fc695367316b037aec8e2c4f26edaf6e6e54cdab5e8425049116da51c4b1.
//
// Solidity: event Redeemed(bytes32 indexed id, uint256 amount, uint64 nonce, uint256 paidNow)
func (_PaymentChannels *PaymentChannelsFilterer) ParseRedeemed(log types.Log) (*PaymentChannelsRedeemed, error) {
	event := new(PaymentChannelsRedeemed)
	if err := _PaymentChannels.contract.UnpackLog(event, "Redeemed", log); err != nil {
		return nil, err
	}
	event.Raw = log
	return event, nil
}

// PaymentChannelsToppedUpIterator is returned from FilterToppedUp and is used to iterate over the raw logs and unpacked data for ToppedUp events raised by the PaymentChannels contract.
type PaymentChannelsToppedUpIterator struct {
	Event *PaymentChannelsToppedUp // Event containing the contract specifics and raw log

	contract *bind.BoundContract // Generic contract to use for unpacking event data
	event    string              // Event name to use for unpacking event data

	logs chan types.Log        // Log channel receiving the found contract events
	sub  ethereum.Subscription // Subscription for errors, completion and termination
	done bool                  // Whether the subscription completed delivering logs
	fail error                 // Occurred error to stop iteration
}

// Next advances the iterator to the subsequent event, returning whether there
// are any more events found. In case of a retrieval or parsing error, false is
// returned and Error() can be queried for the exact failure.
func (it *PaymentChannelsToppedUpIterator) Next() bool {
	// If the iterator failed, stop iterating
	if it.fail != nil {
		return false
	}
	// If the iterator completed, deliver directly whatever's available
	if it.done {
		select {
		case log := <-it.logs:
			it.Event = new(PaymentChannelsToppedUp)
			if err := it.contract.UnpackLog(it.Event, it.event, log); err != nil {
				it.fail = err
				return false
			}
			it.Event.Raw = log
			return true

		default:
			return false
		}
	}
	// Iterator still in progress, wait for either a data or an error event
	select {
	case log := <-it.logs:
		it.Event = new(PaymentChannelsToppedUp)
		if err := it.contract.UnpackLog(it.Event, it.event, log); err != nil {
			it.fail = err
			return false
		}
		it.Event.Raw = log
		return true

	case err := <-it.sub.Err():
		it.done = true
		it.fail = err
		return it.Next()
	}
}

// Error returns any retrieval or parsing error occurred during filtering.
func (it *PaymentChannelsToppedUpIterator) Error() error {
	return it.fail
}

// Close terminates the iteration process, releasing any pending underlying
// resources.
func (it *PaymentChannelsToppedUpIterator) Close() error {
	it.sub.Unsubscribe()
	return nil
}

// PaymentChannelsToppedUp represents a ToppedUp event raised by the PaymentChannels contract.
type PaymentChannelsToppedUp struct {
	Id      [32]byte
	Amount  *big.Int
	Deposit *big.Int
	Raw     types.Log // Blockchain specific contextual infos
}

// FilterToppedUp is a free log retrieval operation binding the contract event 0x2dec156b5ea8eee5b7a582c2e87253d7d59df096556b3ec99aa5d6cec4480524.
//
// Solidity: event ToppedUp(bytes32 indexed id, uint256 amount, uint256 deposit)
func (_PaymentChannels *PaymentChannelsFilterer) FilterToppedUp(opts *bind.FilterOpts, id [][32]byte) (*PaymentChannelsToppedUpIterator, error) {

	var idRule []interface{}
	for _, idItem := range id {
		idRule = append(idRule, idItem)
	}

	logs, sub, err := _PaymentChannels.contract.FilterLogs(opts, "ToppedUp", idRule)
	if err != nil {
		return nil, err
	}
	return &PaymentChannelsToppedUpIterator{contract: _PaymentChannels.contract, event: "ToppedUp", logs: logs, sub: sub}, nil
}

// WatchToppedUp is a free log subscription operation binding the contract event 0x2dec156b5ea8eee5b7a582c2e87253d7d59df096556b3ec99aa5d6cec4480524.
//
// Solidity: event ToppedUp(bytes32 indexed id, uint256 amount, uint256 deposit)
func (_PaymentChannels *PaymentChannelsFilterer) WatchToppedUp(opts *bind.WatchOpts, sink chan<- *PaymentChannelsToppedUp, id [][32]byte) (event.Subscription, error) {

	var idRule []interface{}
	for _, idItem := range id {
		idRule = append(idRule, idItem)
	}

	logs, sub, err := _PaymentChannels.contract.WatchLogs(opts, "ToppedUp", idRule)
	if err != nil {
		return nil, err
	}
	return event.NewSubscription(func(quit <-chan struct{}) error {
		defer sub.Unsubscribe()
		for {
			select {
			case log := <-logs:
				// New log arrived, parse the event and forward to the user
				event := new(PaymentChannelsToppedUp)
				if err := _PaymentChannels.contract.UnpackLog(event, "ToppedUp", log); err != nil {
					// If the signature doesn't match, skip this log.
					if errors.Is(err, bind.ErrEventSignatureMismatch) {
						continue
					}
					return err
				}
				event.Raw = log

				select {
				case sink <- event:
				case err := <-sub.Err():
					return err
				case <-quit:
					return nil
				}
			case err := <-sub.Err():
				return err
			case <-quit:
				return nil
			}
		}
	}), nil
}

// ParseToppedUp is a log parse operation binding the contract event 0x2dec156b5ea8eee5b7a582c2e87253d7d59df096556b3ec99aa5d6cec4480524.
//
// Solidity: event ToppedUp(bytes32 indexed id, uint256 amount, uint256 deposit)
func (_PaymentChannels *PaymentChannelsFilterer) ParseToppedUp(log types.Log) (*PaymentChannelsToppedUp, error) {
	event := new(PaymentChannelsToppedUp)
	if err := _PaymentChannels.contract.UnpackLog(event, "ToppedUp", log); err != nil {
		return nil, err
	}
	event.Raw = log
	return event, nil
}
